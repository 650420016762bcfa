"""NVIDIA's real toolkit 1.20.0 packages through the whole pipeline, deb and rpm, maintainer scripts and all.

The upstream is the real-packages profile (:func:`tests.upstream.real_upstream`): NVIDIA's
``nvidia-container-toolkit`` and ``-base`` built from NVIDIA's source and packaging, with stand-in
``libnvidia-container1``/``-tools`` carrying the real 1.20.0-1 fields. ``mirror sync`` -> ``bundle
build`` -> ``install`` -> ``status`` -> ``configure verify`` -> ``uninstall`` then runs:

- deb: into a real minimal Debian (debootstrap, see ``tests/test_node_debootstrap.py``), where dpkg
  runs NVIDIA's postinst chrooted (``nvidia-ctk config --in-place``, ``deb-systemd-helper enable``);
- rpm: into the rpm world of :mod:`tests.rpm_world` (real rpm database, Debian's libc and shell
  repackaged by rpmbuild), where rpm runs NVIDIA's ``%post``, ``%posttrans`` and ``%preun``. A
  ``systemctl`` stand-in in that root records the calls the scriptlets make (there is no systemd to
  talk to), which is how the test sees that each scriptlet ran.

A maintainer script that fails stops ``install`` with one sentence naming the package and the script
(exit 1), and the node ends as it was: deb with a root where NVIDIA's own postinst fails, rpm with a
stand-in ``libnvidia-container-tools`` whose ``%post`` exits 1 (NVIDIA's ``%post`` ignores
``nvidia-ctk``'s failure: it has no ``set -e``, so it cannot be the one that fails).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Dict

import pytest

from tests.cli_runner import CliResult, install_argv, run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.node_fixtures import TOOLKIT
from tests.rpm_world import DBPATH, rpm_world_missing, rpm_world_tarball, unpack
from tests.test_node_debootstrap import debian_root, debian_tarball  # noqa: F401 (fixtures)
from tests.upstream import (
    UpstreamServer,
    UpstreamTree,
    checked_build,
    copy_upstream,
    real_upstream,
    stop_agent,
)
from tests.upstream.rpms import write_repodata

pytestmark = pytest.mark.slow

VERSION = "1.20.0"
CONTAINERD_BASE = Path(__file__).parent / "data" / "fixtures" / "containerd" / "config.toml.base"
CONFIG = "etc/containerd/config.toml"
SYSTEMCTL_LOG = "var/log/systemctl-calls"
#: what NVIDIA's %post, %posttrans and %preun ask systemctl (nvidia-container-toolkit.spec, systemd's rpm macros)
POST_PRESET = "--no-reload preset nvidia-cdi-refresh.path nvidia-cdi-refresh.service"
POSTTRANS_START = "start nvidia-cdi-refresh.path"
PREUN_DISABLE = "--no-reload disable --now nvidia-cdi-refresh.path nvidia-cdi-refresh.service"


@pytest.fixture(scope="module")
def real_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamTree]:
    """The real-packages upstream, cached like ``upstream_tree``."""
    checked_build()  # in the repository: missing or changed fails here, it never skips
    cache = os.environ.get("GPU_AIRGAP_TEST_CACHE")
    cache_dir = (
        Path(cache)
        if cache
        else (
            tmp_path_factory.mktemp("real-cache")
            if cache == ""
            else Path.home() / ".cache" / "gpu-airgap-tests"
        )
    )
    tree = real_upstream(cache_dir)
    yield tree
    stop_agent(tree.gnupghome)


def sync_and_bundle(tree: UpstreamTree, work: Path, key: TestKey, fmt: str) -> Path:
    """``mirror sync`` 1.20.0 of ``fmt`` from ``tree`` served on 127.0.0.1, then ``bundle build`` signed by ``key``."""
    arch, target = ("amd64", "deb/amd64") if fmt == "deb" else ("amd64", "rpm/x86_64")
    with UpstreamServer(tree.root) as server:
        synced = run_mirror_sync(
            work / "mirror", server.url, tree.public_key, "--quiet", version=VERSION, fmt=fmt, arch=arch
        )
    assert synced.exit_code == 0, synced.stderr
    bundle = work / f"bundle-{fmt}.tar.zst"
    built = run_bundle_build(work / "mirror", key, bundle, version=VERSION, target=target)
    assert built.exit_code == 0, built.stderr
    return bundle


@pytest.fixture(scope="module")
def deb_bundle(
    real_tree: UpstreamTree, operator_key: TestKey, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return sync_and_bundle(real_tree, tmp_path_factory.mktemp("real-deb"), operator_key, "deb")


@pytest.fixture(scope="module")
def rpm_bundle(
    real_tree: UpstreamTree, operator_key: TestKey, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return sync_and_bundle(real_tree, tmp_path_factory.mktemp("real-rpm"), operator_key, "rpm")


@pytest.fixture(scope="module")
def rpm_world() -> Path:
    """The cached tarball of the rpm-world root (built once, ~6 s)."""
    reason = rpm_world_missing()
    if reason:
        pytest.skip(reason)
    return rpm_world_tarball()


@pytest.fixture
def rpm_root(rpm_world: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh rpm-world root for one test, with a systemctl that records its arguments."""
    root = unpack(rpm_world, tmp_path / "rpm-root")
    recorder = root / "usr/bin/systemctl"
    recorder.parent.mkdir(parents=True, exist_ok=True)
    recorder.write_text(f'#!/bin/sh\necho "$*" >> /{SYSTEMCTL_LOG}\n')
    recorder.chmod(0o755)
    (root / SYSTEMCTL_LOG).parent.mkdir(parents=True, exist_ok=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def with_containerd(root: Path) -> bytes:
    """Give the node a containerd config (the docs/node.md walk-through's) and return its bytes."""
    config = root / CONFIG
    config.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CONTAINERD_BASE, config)
    return config.read_bytes()


def install(bundle: Path, key: TestKey, root: Path) -> CliResult:
    return run_cli(
        *install_argv(bundle, key, root),
        "--runtime",
        "containerd",
        "--json",
    )


def tree_state(root: Path, *tops: str) -> Dict[str, tuple[object, ...]]:
    """Every path under ``root/top``: mode, and size + mtime of files, target of links (any write by dpkg or rpm shows).

    A directory's mtime is left out: adding and removing an entry changes it, the tree stays the same.
    """
    out: Dict[str, tuple[object, ...]] = {}
    for top in tops:
        for path in (root / top).rglob("*"):
            st = path.lstat()
            if path.is_symlink():
                out[str(path.relative_to(root))] = (st.st_mode, os.readlink(path))
            else:
                out[str(path.relative_to(root))] = (
                    (st.st_mode,) if path.is_dir() else (st.st_mode, st.st_size, st.st_mtime_ns)
                )
    return out


def error_sentence(result: CliResult) -> str:
    """The one error line install printed (progress lines come before it on stderr)."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("gpu-airgap: error: ")]
    assert len(errors) == 1 and result.stderr.rstrip("\n").endswith(errors[0]), result.stderr
    return errors[0]


def chroot(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, check=False)


def dpkg_packages(root: Path) -> Dict[str, str]:
    """Every package the root's dpkg knows, with version and state."""
    out = chroot(root, "dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n").stdout
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines()}


def rpm_packages(root: Path) -> list[str]:
    out = subprocess.run(
        ["rpm", "--root", str(root), "--dbpath", DBPATH, "-qa"], capture_output=True, text=True, check=True
    )
    return sorted(out.stdout.split())


def check_status_verify_uninstall(root: Path, config_before: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """``status`` and ``configure verify`` find nothing wrong; ``uninstall`` removes the packages and restores the config.

    They get the root as a relative path (rpm itself refuses a relative ``--root``).
    """
    monkeypatch.chdir(root.parent)
    status = run_cli("status", "--root", root.name, "--json")
    assert status.exit_code == 0, status.stdout + status.stderr
    report = json.loads(status.stdout)
    assert report["packages"] == {name: f"{VERSION}-1" for name in TOOLKIT} and report["problems"] == []
    verified = run_cli("configure", "verify", "--root", root.name)
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    removed = run_cli("uninstall", "--root", root.name)
    assert removed.exit_code == 0, removed.stderr
    assert not (root / "usr/bin/nvidia-ctk").exists()
    assert (root / CONFIG).read_bytes() == config_before


def test_real_debs_install_into_debian_where_nvidias_postinst_runs(
    debian_root: Path,  # noqa: F811
    deb_bundle: Path,
    operator_key: TestKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = with_containerd(debian_root)
    installed = install(deb_bundle, operator_key, debian_root)
    assert installed.exit_code == 0, installed.stderr
    assert json.loads(installed.stdout)["engines"] == {"containerd": "registered runtime 'nvidia'"}

    ctk = chroot(debian_root, "nvidia-ctk", "--version")
    assert ctk.returncode == 0 and ctk.stdout.startswith(
        f"NVIDIA Container Toolkit CLI version {VERSION}\n"
    ), ctk
    packages = dpkg_packages(debian_root)
    assert {name: packages[name] for name in TOOLKIT} == {name: f"{VERSION}-1 ii " for name in TOOLKIT}
    # NVIDIA's postinst ran chrooted: nvidia-ctk wrote the runtime config, the toolkit's postinst made
    # its symlink, and debhelper's snippet enabled the CDI refresh units.
    runtime_config = (debian_root / "etc/nvidia-container-runtime/config.toml").read_text()
    assert "[nvidia-container-runtime]" in runtime_config
    assert (
        os.readlink(debian_root / "usr/bin/nvidia-container-toolkit")
        == "/usr/bin/nvidia-container-runtime-hook"
    )
    wants = debian_root / "etc/systemd/system/multi-user.target.wants"
    assert os.readlink(wants / "nvidia-cdi-refresh.path") == "/lib/systemd/system/nvidia-cdi-refresh.path"

    check_status_verify_uninstall(debian_root, before, monkeypatch)
    assert all(not dpkg_packages(debian_root).get(name, "").endswith("ii ") for name in TOOLKIT)


def test_a_failing_postinst_is_named_and_the_debian_node_ends_as_it_was(
    debian_root: Path,  # noqa: F811
    deb_bundle: Path,
    operator_key: TestKey,
) -> None:
    # A directory where NVIDIA's postinst has nvidia-ctk write its config: the real script fails.
    (debian_root / "etc/nvidia-container-runtime/config.toml").mkdir(parents=True)
    config_before = with_containerd(debian_root)
    packages_before = dpkg_packages(debian_root)
    files_before = tree_state(debian_root, "etc", "usr", "lib")

    failed = install(deb_bundle, operator_key, debian_root)
    assert failed.exit_code == 1, failed.stderr
    message = error_sentence(failed)
    assert message.startswith("gpu-airgap: error: dpkg failed: the ")
    assert "the postinst script of nvidia-container-toolkit-base failed with exit status 1" in message
    assert "read /etc/nvidia-container-runtime/config.toml: is a directory" in message
    assert "the node now has " + "; ".join(f"{n}: not installed" for n in TOOLKIT) in message

    assert dpkg_packages(debian_root) == packages_before  # purged: not even config-files entries remain
    assert tree_state(debian_root, "etc", "usr", "lib") == files_before
    assert (debian_root / CONFIG).read_bytes() == config_before
    assert not (debian_root / "var/lib/gpu-airgap/state.json").exists()


def test_real_rpms_install_into_an_rpm_root_where_nvidias_scriptlets_run(
    rpm_root: Path, rpm_bundle: Path, operator_key: TestKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = with_containerd(rpm_root)
    system = rpm_packages(rpm_root)
    installed = install(rpm_bundle, operator_key, rpm_root)
    assert installed.exit_code == 0, installed.stderr

    ctk = chroot(rpm_root, "/usr/bin/nvidia-ctk", "--version")
    assert ctk.returncode == 0 and ctk.stdout.startswith(
        f"NVIDIA Container Toolkit CLI version {VERSION}\n"
    ), ctk
    assert rpm_packages(rpm_root) == sorted([*system, *(f"{n}-{VERSION}-1.x86_64" for n in TOOLKIT)])
    # %post of -base ran nvidia-ctk and preset the units; %posttrans of the toolkit made the symlink
    # and -base's started the units.
    assert "[nvidia-container-runtime]" in (rpm_root / "etc/nvidia-container-runtime/config.toml").read_text()
    assert (
        os.readlink(rpm_root / "usr/bin/nvidia-container-toolkit") == "/usr/bin/nvidia-container-runtime-hook"
    )
    calls = (rpm_root / SYSTEMCTL_LOG).read_text().splitlines()
    assert POST_PRESET in calls and "daemon-reload" in calls and POSTTRANS_START in calls
    assert PREUN_DISABLE not in calls

    check_status_verify_uninstall(rpm_root, before, monkeypatch)
    assert rpm_packages(rpm_root) == system
    assert PREUN_DISABLE in (rpm_root / SYSTEMCTL_LOG).read_text().splitlines()  # %preun ran on erase


def failing_tools_rpm(out: Path) -> Path:
    """A stand-in libnvidia-container-tools 1.20.0-1 whose %post exits 1 (the real fields otherwise)."""
    spec = out / "tools.spec"
    spec.write_text(
        textwrap.dedent("""\
        %define debug_package %{nil}
        Name: libnvidia-container-tools
        Version: 1.20.0
        Release: 1
        Summary: stand-in whose post-install scriptlet fails
        License: Apache-2.0
        AutoReqProv: no
        Requires: libnvidia-container1 = 1.20.0-1
        Requires: glibc >= 2.14
        Requires: libcap >= 2.10
        %description
        stand-in
        %install
        mkdir -p %{buildroot}/usr/bin
        printf '#!/bin/sh\\necho stand-in\\n' > %{buildroot}/usr/bin/nvidia-container-cli
        chmod 755 %{buildroot}/usr/bin/nvidia-container-cli
        %files
        /usr/bin/nvidia-container-cli
        %post
        echo "libnvidia-container-tools: failing on purpose" >&2
        exit 1
        """)
    )
    subprocess.run(
        [
            "rpmbuild",
            "-bb",
            "--quiet",
            "--define",
            f"_topdir {out / 'top'}",
            "--define",
            f"_rpmdir {out}",
            str(spec),
        ],
        check=True,
        capture_output=True,
    )
    return out / "x86_64" / "libnvidia-container-tools-1.20.0-1.x86_64.rpm"


def test_a_failing_rpm_post_scriptlet_is_named_and_the_rpm_node_ends_as_it_was(
    real_tree: UpstreamTree, rpm_root: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    site = copy_upstream(real_tree, tmp_path / "site")
    repo = site.rpm_repo("stable", "x86_64")
    shutil.copyfile(failing_tools_rpm(tmp_path), repo / "libnvidia-container-tools-1.20.0-1.x86_64.rpm")
    shutil.rmtree(repo / "repodata")
    write_repodata(repo, key=real_tree.signing_key)
    bundle = sync_and_bundle(site, tmp_path / "work", operator_key, "rpm")
    config_before = with_containerd(rpm_root)
    packages_before = rpm_packages(rpm_root)
    files_before = tree_state(rpm_root, "etc", "usr", "lib")

    failed = install(bundle, operator_key, rpm_root)
    assert failed.exit_code == 1, failed.stderr
    message = error_sentence(failed)
    assert message.startswith("gpu-airgap: error: rpm failed: the ")
    assert "the %post script of libnvidia-container-tools failed with exit status 1" in message
    assert "'libnvidia-container-tools: failing on purpose'" in message
    assert "the node now has " + "; ".join(f"{n}: not installed" for n in TOOLKIT) in message

    assert rpm_packages(rpm_root) == packages_before
    after = tree_state(rpm_root, "etc", "usr", "lib")
    # rpm went on after the failed %post, so -base's %post ran: nvidia-ctk wrote its config, a file no
    # package owns, in a directory rpm made (as NVIDIA's spec owns neither, an ordinary `rpm -e` keeps
    # them too). Everything else is as it was.
    assert {k: v for k, v in after.items() if k not in files_before} == {
        "etc/nvidia-container-runtime": (0o40755,),
        "etc/nvidia-container-runtime/config.toml": after["etc/nvidia-container-runtime/config.toml"],
        "etc/nvidia-container-toolkit": (0o40755,),
    }
    assert {k: v for k, v in after.items() if k in files_before} == files_before
    assert (rpm_root / CONFIG).read_bytes() == config_before
    assert not (rpm_root / "var/lib/gpu-airgap/state.json").exists()
