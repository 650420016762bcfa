"""A user who is not root is told "must run as root" (exit 12) by the commands that would write what only root may (issue 25 item 6).

The node zipapp runs as ``nobody`` (``setpriv``) with the host's python3, as an admin who forgot
``sudo`` would: install, uninstall, restart and configure on the live system's paths are refused
before they change anything; a dry run, which only reads, is not. Under a ``--root`` the user owns,
nothing is refused: the commands write only there (dpkg gets ``--force-not-root``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Dict, List

import pytest

from mirror.bundle.zipapp import build_zipapp
from plumbing.errors import ExitCode
from tests.node_fixtures import (
    TOOLKIT,
    build_target,
    dpkg_versions,
    rpm_query,
    seed_containerd_node,
    seed_rpm_root,
)
from tests.test_node_install import _keys, _setup  # noqa: F401 (the autouse key fixture)

PYTHON = Path("/usr/bin/python3")  # the host's: the test runner's own lives under /root, closed to others
USER = "nobody"
REFUSAL = f"must run as root: {{}} is not writable by user {USER}; run the command as root (sudo)"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not PYTHON.exists(),
    reason="needs root, setpriv and /usr/bin/python3 to run the CLI as another user",
)


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A directory ``nobody`` can read, holding the node zipapp and the node tool's private cache."""
    top = Path(tempfile.mkdtemp(prefix="gpu-airgap-not-root-"))
    try:
        top.chmod(0o755)
        (top / "node.pyz").write_bytes(build_zipapp(epoch=0))
        (top / "node.pyz").chmod(0o644)
        cache = top / "cache"
        cache.mkdir(mode=0o700)
        os.chown(cache, pwd.getpwnam(USER).pw_uid, -1)
        yield top
    finally:
        shutil.rmtree(top)


def as_nobody(shared: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GPU_AIRGAP_NODE_CACHE": str(shared / "cache")}
    command = ["setpriv", f"--reuid={USER}", "--regid=nogroup", "--clear-groups", "env", "-i"]
    command += [f"{k}={v}" for k, v in env.items()]
    return subprocess.run(
        [*command, str(PYTHON), "-I", str(shared / "node.pyz"), *argv],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )


def readable_bundle(tmp_path: Path, shared: Path, directory: str, fmt: str = "deb") -> List[str]:
    """A signed stand-in bundle and its key, copied where ``nobody`` can read them: the install arguments."""
    arch = {"deb": "amd64", "rpm": "x86_64"}[fmt]
    bundle, key, _, _ = _setup(tmp_path, build_target(tmp_path / "packages", fmt, "1.17.8-1", arch))
    place = shared / directory
    place.mkdir(mode=0o755)
    for source in (bundle, key):
        shutil.copyfile(source, place / source.name)
        (place / source.name).chmod(0o644)
    return [str(place / bundle.name), "--keyring", str(place / key.name)]


def owned_by_nobody(*tops: str) -> List[str]:
    uid = pwd.getpwnam(USER).pw_uid
    found = []
    for top in map(Path, tops):
        found += [str(p) for p in [top, *top.rglob("*")] if p.exists() and p.lstat().st_uid == uid]
    return found


def test_commands_that_write_the_live_system_say_must_run_as_root(tmp_path: Path, shared: Path) -> None:
    install = readable_bundle(tmp_path, shared, "live")
    expected: Dict[str, List[str]] = {
        "install": ["install", *install],
        "uninstall": ["uninstall"],
        "restart": ["restart"],
    }
    for what, argv in expected.items():
        done = as_nobody(shared, *argv)
        assert done.returncode == ExitCode.NOT_ROOT, (what, done.stderr)
        assert done.stderr.splitlines()[-1].startswith(
            "gpu-airgap: error: " + REFUSAL.format("/var/lib/gpu-airgap")  # whether it exists or not
        ), done.stderr
    configured = as_nobody(shared, "configure", "containerd")
    assert configured.returncode == ExitCode.NOT_ROOT, configured.stderr
    assert "gpu-airgap: error: must run as root: /etc/" in configured.stderr
    assert "is not writable by user nobody" in configured.stderr
    assert owned_by_nobody("/var/lib/gpu-airgap", "/etc/containerd", "/etc/cdi") == []


def test_a_dry_run_only_reads_so_it_is_not_refused(shared: Path) -> None:
    planned = as_nobody(shared, "configure", "containerd", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert "dry run: nothing written (containerd)" in planned.stdout


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_under_a_root_the_user_owns_install_status_and_uninstall_run_without_root(
    tmp_path: Path, shared: Path, fmt: str
) -> None:
    install = readable_bundle(tmp_path, shared, f"own-{fmt}", fmt)
    root = shared / f"node-{fmt}"
    if fmt == "deb":
        seed_containerd_node(root)
    else:
        seed_rpm_root(root, tmp_path / "seed")
    uid = pwd.getpwnam(USER).pw_uid
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, -1)
    installed = as_nobody(shared, "install", *install, "--root", str(root))
    assert installed.returncode == 0, installed.stderr
    assert installed_versions(root, fmt) == sorted(f"{name} 1.17.8-1" for name in TOOLKIT)
    assert as_nobody(shared, "status", "--root", str(root)).returncode == 0
    removed = as_nobody(shared, "uninstall", "--root", str(root))
    assert removed.returncode == 0, removed.stderr
    assert installed_versions(root, fmt) == []
    assert owned_by_nobody(str(root)) and not [p for p in root.rglob("*") if p.lstat().st_uid == 0]


def installed_versions(root: Path, fmt: str) -> List[str]:
    if fmt == "deb":
        return sorted(f"{name} {version}" for name, version in dpkg_versions(root).items())
    done = subprocess.run([*rpm_query(root), *TOOLKIT], capture_output=True, text=True)
    return sorted(line for line in done.stdout.splitlines() if "not installed" not in line)
