"""A failed maintainer script is named from dpkg's and rpm's own words; the rollback leaves no trace of new packages."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest

from installer import install as install_mod
from installer.backends.scripts import (
    MaintainerScriptFailed,
    ScriptFailure,
    dpkg_script_failures,
    rpm_script_failures,
)
from installer.install import InstallFailed, InstallOptions
from installer.preflight import Preflight
from installer.target import StagedPackage
from plumbing.errors import CommandError
from tests.fakes import FakeBackend

# dpkg 1.21's stderr when NVIDIA's postinst fails (seen in tests/test_real_packages.py).
DPKG_POSTINST = """\
time="2026-12-01T14:44:02Z" level=error msg="unable to create config: read /etc/nvidia-container-runtime/config.toml: is a directory"
dpkg: error processing package nvidia-container-toolkit-base (--install):
 installed nvidia-container-toolkit-base package post-installation script subprocess returned error exit status 1
dpkg: dependency problems prevent configuration of nvidia-container-toolkit:
 nvidia-container-toolkit depends on nvidia-container-toolkit-base (= 1.20.0-1); however:
  Package nvidia-container-toolkit-base is not configured yet.

dpkg: error processing package nvidia-container-toolkit (--install):
 dependency problems - leaving unconfigured
Errors were encountered while processing:
 nvidia-container-toolkit-base
 nvidia-container-toolkit
"""
DPKG_PREINST = """\
dpkg: error processing archive /s/libnvidia-container1_1.20.0-1_amd64.deb (--install):
 new libnvidia-container1:amd64 package pre-installation script subprocess was killed by signal (Terminated)
"""
RPM_POST = """\
rpm: RPM should not be used directly install RPM packages, use Alien instead!
libnvidia-container-tools: failing on purpose
warning: %post(libnvidia-container-tools-1.20.0-1.x86_64) scriptlet failed, exit status 1
"""
RPM_PRE = "error: %prein(nvidia-container-toolkit-base-1.20.0-1.x86_64) scriptlet failed, exit status 3\nerror: nvidia-container-toolkit-base-1.20.0-1.x86_64: install failed\n"


def test_dpkg_postinst_failure_names_package_script_status_and_the_scripts_last_words() -> None:
    assert dpkg_script_failures(DPKG_POSTINST) == [
        ScriptFailure(
            "nvidia-container-toolkit-base",
            "postinst",
            "exit status 1",
            'time="2026-12-01T14:44:02Z" level=error msg="unable to create config: read /etc/nvidia-container-runtime/config.toml: is a directory"',
        )
    ]


def test_dpkg_preinst_killed_by_a_signal_drops_the_architecture_qualifier() -> None:
    assert dpkg_script_failures(DPKG_PREINST) == [
        ScriptFailure("libnvidia-container1", "preinst", "killed by signal (Terminated)")
    ]


def test_rpm_post_warning_and_pre_error_are_both_failures() -> None:
    assert rpm_script_failures(RPM_POST) == [
        ScriptFailure(
            "libnvidia-container-tools",
            "%post",
            "exit status 1",
            "libnvidia-container-tools: failing on purpose",
        )
    ]
    assert rpm_script_failures(RPM_PRE) == [
        ScriptFailure("nvidia-container-toolkit-base", "%pre", "exit status 3")
    ]


def test_dependency_problems_alone_are_not_script_failures() -> None:
    assert dpkg_script_failures(DPKG_POSTINST.split("dpkg: dependency problems")[1]) == []
    assert rpm_script_failures("error: Failed dependencies:\n\tglibc >= 2.14 is needed by x\n") == []


def test_the_error_is_one_sentence_naming_each_failed_script() -> None:
    error = MaintainerScriptFailed(
        ["dpkg", "--install"], 1, DPKG_POSTINST, dpkg_script_failures(DPKG_POSTINST)
    )
    assert str(error).startswith(
        "the postinst script of nvidia-container-toolkit-base failed with exit status 1, after printing "
    )
    assert "\n" not in str(error) and isinstance(error, CommandError)


class HalfInstalling(FakeBackend):
    """dpkg as it fails: every file unpacked, then a script failed; ``leftovers`` had config files before."""

    def __init__(self, leftovers: Sequence[str]) -> None:
        super().__init__(name="dpkg")
        self.leftovers = list(leftovers)

    def without_trace(self, names: Sequence[str]) -> list[str]:
        return [n for n in names if n not in self.leftovers]

    def install(self, files: Sequence[Path], *, allow_downgrade: bool = False) -> None:
        for f in files:
            self.installed[f.name.split("_")[0]] = "1.20.0-1"
        failures = dpkg_script_failures(DPKG_POSTINST)
        raise MaintainerScriptFailed(["dpkg", "--install"], 1, DPKG_POSTINST, failures)


def test_rollback_purges_new_packages_but_keeps_config_files_an_earlier_removal_left() -> None:
    names = ("libnvidia-container1", "nvidia-container-toolkit-base")
    packages = [StagedPackage(n, "1.20.0-1", "amd64", Path(f"/s/{n}_1.20.0-1_amd64.deb"), 1) for n in names]
    backend = HalfInstalling(leftovers=["nvidia-container-toolkit-base"])
    with pytest.raises(
        InstallFailed, match=r"^dpkg failed: the postinst script of nvidia-container-toolkit-base failed"
    ) as info:
        install_mod._install_packages(
            backend, Preflight(to_install=packages), {n: None for n in names}, InstallOptions()
        )
    assert backend.calls[-2:] == [("remove", *reversed(names)), ("purge", "libnvidia-container1")]
    assert (
        "the node now has libnvidia-container1: not installed; nvidia-container-toolkit-base: not installed"
        in str(info.value)
    )
