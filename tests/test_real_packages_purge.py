"""``uninstall --purge`` with NVIDIA's real 1.20.0 packages (issue 25 item 8).

``dpkg --remove`` leaves ``nvidia-container-toolkit-base`` in state ``rc`` with its conffile, and no
package manager removes ``/etc/nvidia-container-runtime/config.toml``: NVIDIA's postinst / %post
generate it with ``nvidia-ctk``. ``rpm -e`` keeps a %config file edited since as ``.rpmsave``.
Without ``--purge`` the uninstall says what stays; with it nothing stays, and ``uninstall --purge``
after a plain uninstall purges what that one left. Roots and bundles: :mod:`tests.test_real_packages`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from plumbing.errors import ExitCode
from tests.cli_runner import CliResult, run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import TOOLKIT
from tests.test_node_debootstrap import debian_root, debian_tarball  # noqa: F401 (fixtures)
from tests.test_real_packages import (  # noqa: F401 (fixtures)
    DBPATH,
    chroot,
    deb_bundle,
    install,
    real_tree,
    rpm_bundle,
    rpm_root,
    rpm_world,
    with_containerd,
)

pytestmark = pytest.mark.slow

RUNTIME_CONFIG = "etc/nvidia-container-runtime/config.toml"
REFRESH_ENV = "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"


def uninstall(root: Path, *flags: str) -> CliResult:
    result = run_cli("uninstall", "--root", str(root), *flags)
    assert result.exit_code == 0, result.stderr
    return result


def dpkg_states(root: Path) -> Dict[str, str]:
    out = chroot(root, "dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\n", *TOOLKIT).stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if len(line.split()) > 1}


def test_deb_uninstall_says_what_stays_and_purge_leaves_no_rc_entry_or_config(
    debian_root: Path,  # noqa: F811
    deb_bundle: Path,  # noqa: F811
    operator_key: TestKey,
) -> None:
    with_containerd(debian_root)
    assert install(deb_bundle, operator_key, debian_root).exit_code == 0
    plain = uninstall(debian_root)
    assert dpkg_states(debian_root)["nvidia-container-toolkit-base"] == "rc"
    assert (debian_root / RUNTIME_CONFIG).is_file() and (debian_root / REFRESH_ENV).is_file()
    assert (
        "left on the node: nvidia-container-toolkit 1.20.0-1 (removed, config files remain); "
        "nvidia-container-toolkit-base 1.20.0-1 (removed, config files remain); files "
        f"/{REFRESH_ENV}, /{RUNTIME_CONFIG} (`gpu-airgap uninstall --purge` removes them)"
    ) in plain.stdout

    later = uninstall(debian_root, "--purge")  # no install recorded any more: what the plain one left
    assert (
        "purged nvidia-container-toolkit, nvidia-container-toolkit-base: no config files remain"
        in later.stdout
    )
    assert dpkg_states(debian_root) == {}
    assert not (debian_root / RUNTIME_CONFIG).exists() and not (debian_root / REFRESH_ENV).exists()
    nothing = run_cli("uninstall", "--root", str(debian_root), "--purge")
    assert nothing.exit_code == ExitCode.ERROR and "nothing to uninstall" in nothing.stderr

    assert install(deb_bundle, operator_key, debian_root).exit_code == 0
    dry = uninstall(debian_root, "--purge", "--dry-run")
    assert "would purge nvidia-container-toolkit, nvidia-container-toolkit-base" in dry.stdout
    assert (debian_root / RUNTIME_CONFIG).is_file()
    purged = run_cli("uninstall", "--root", str(debian_root), "--purge", "--json")
    assert purged.exit_code == 0, purged.stderr
    assert (
        f"deleted /{RUNTIME_CONFIG} (left by the packages' scripts or rpm)"
        in json.loads(purged.stdout)["messages"]
    )
    assert dpkg_states(debian_root) == {}
    assert not (debian_root / RUNTIME_CONFIG).exists()


def test_rpm_uninstall_names_the_rpmsave_copy_and_purge_deletes_it(
    rpm_root: Path,  # noqa: F811
    rpm_bundle: Path,  # noqa: F811
    operator_key: TestKey,
) -> None:
    with_containerd(rpm_root)
    assert install(rpm_bundle, operator_key, rpm_root).exit_code == 0
    (rpm_root / REFRESH_ENV).write_text("# the admin's own setting\n")  # a %config(noreplace) edited since
    plain = uninstall(rpm_root)
    assert f"left on the node: files /{REFRESH_ENV}.rpmsave, /{RUNTIME_CONFIG}" in plain.stdout
    assert (rpm_root / f"{REFRESH_ENV}.rpmsave").read_text() == "# the admin's own setting\n"

    assert install(rpm_bundle, operator_key, rpm_root).exit_code == 0
    (rpm_root / REFRESH_ENV).write_text("# edited again\n")
    purged = uninstall(rpm_root, "--purge")
    assert f"/{REFRESH_ENV}.rpmsave" in purged.stdout and f"/{RUNTIME_CONFIG}" in purged.stdout
    assert not list((rpm_root / "etc/nvidia-container-toolkit").glob("*.rpmsave"))
    assert not (rpm_root / RUNTIME_CONFIG).exists()
    queried = subprocess.run(
        ["rpm", "--root", str(rpm_root), "--dbpath", DBPATH, "-q", *TOOLKIT], capture_output=True, text=True
    )
    assert queried.stdout.count("is not installed") == len(TOOLKIT)
