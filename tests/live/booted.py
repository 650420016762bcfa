"""A minimal Debian booted with systemd as PID 1 (systemd-nspawn), containerd a unit in it.

The root is ``debootstrap --variant=minbase --include=NODE_PACKAGES`` from the local repo that
``scripts/prepare-debootstrap-cache`` fills (``node-repo``), served on 127.0.0.1, cached as a
tarball keyed by that repo's Release file. Each test unpacks a fresh copy and boots it:

- ``--private-network``: the node's sshd, containerd and anything else never touch the host's
  network; ssh reaches the node through ``sshd -i`` run in its namespaces (see :meth:`ssh_proxy`).
- This host's PID 1 is not systemd, so nspawn puts the container's cgroups under the cgroup it was
  started in (``payload``/``supervisor``). It is started in a cgroup of its own in the named
  systemd and unified hierarchies, so two tests (or two checkouts) never share one.
- Stopping: SIGTERM to the nspawn PID we started (nspawn asks the node's systemd to power off),
  SIGKILL to its process group after a grace period, SIGKILL to any PID left in its cgroups, then
  the cgroups and the root are removed. Nothing is matched by name.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

from tests.live.cache import cached_dir, digest
from tests.upstream import UpstreamServer

REPO_ROOT = Path(__file__).resolve().parents[2]
PREPARE = REPO_ROOT / "scripts" / "prepare-debootstrap-cache"
CACHE = Path(os.environ.get("GPU_AIRGAP_TEST_CACHE") or Path.home() / ".cache" / "gpu-airgap-tests") / "debootstrap"
NODE_REPO = CACHE / "node-repo"
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: the hierarchies nspawn makes its payload/supervisor cgroups in when the host has no systemd
NSPAWN_HIERARCHIES = ("systemd", "unified")
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: bump when the root's own set-up (``_prepare_root``) changes, so cached roots are rebuilt
RECIPE = "2"


def node_packages() -> str:
    """The packages the booted root adds to minbase: the cache script's list, so both agree."""
    match = re.search(r'^NODE_PACKAGES="([^"]+)"', PREPARE.read_text(), re.M)
    assert match, f"{PREPARE} no longer sets NODE_PACKAGES"
    return match.group(1)


def _suite() -> str:
    fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return fields.get("VERSION_CODENAME", "").strip('"')


def missing_reason() -> str:
    """Why a booted node cannot be had here, or ""."""
    for tool in ("systemd-nspawn", "nsenter", "debootstrap", "zstd", "ssh"):
        if shutil.which(tool) is None:
            return f"the booted-node tests need {tool} (make sysdeps installs it)"
    if not (NODE_REPO / "READY").is_file():
        return f"no node packages in {NODE_REPO}: run {PREPARE} as root on a host with apt (make pytest does)"
    if not all((CGROUP_ROOT / h / "cgroup.procs").is_file() for h in NSPAWN_HIERARCHIES):
        return "the booted-node tests expect the hybrid cgroup layout of this machine (systemd and unified hierarchies)"
    return ""


def _prepare_root(root: Path) -> None:
    """What a node has that minbase lacks: a hostname and /etc/hosts; no sshd listening on the network."""
    (root / "etc/hostname").write_text("gpu-node\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 gpu-node\n::1 localhost\n")
    # sshd runs per connection (sshd -i through nsenter), never as a listening service
    (root / "etc/systemd/system/multi-user.target.wants/ssh.service").unlink(missing_ok=True)
    (root / "etc/systemd/system/sshd.service").unlink(missing_ok=True)


def _build_tarball(scratch: Path) -> None:
    root = scratch / "root"
    suite = _suite()
    with UpstreamServer(NODE_REPO) as server:
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={node_packages()}", "--no-check-gpg", suite, str(root),
             server.url + "/"],
            capture_output=True, text=True, timeout=1200, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _prepare_root(root)
    subprocess.run(
        ["tar", "--numeric-owner", "--xattrs", "-I", "zstd -T0 -3", "-C", str(root), "-cf", str(scratch / "root.tar.zst"), "."],
        check=True, capture_output=True,
    )  # fmt: skip
    shutil.rmtree(root)


def node_tarball() -> Path:
    """The booted node's root as a tarball, debootstrapped once per node-repo and recipe."""
    debootstrap = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "debootstrap"], capture_output=True, text=True, check=False)
    release = (NODE_REPO / "dists" / _suite() / "Release").read_bytes()
    key = digest(RECIPE, debootstrap.stdout, release)
    return cached_dir("booted-node", key, _build_tarball) / "root.tar.zst"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


class BootedNode:
    """One booted container over a fresh copy of the node root (use as a context manager)."""

    def __init__(self, work: Path, tarball: Path) -> None:
        self.work = work
        self.root = work / "root"
        self.name = f"gal-node-{os.getpid()}-{os.urandom(3).hex()}"
        self.log = work / "nspawn.log"
        self.tarball = tarball
        self.nspawn: Optional[subprocess.Popen[bytes]] = None
        self.pid1 = 0

    # -- life cycle ------------------------------------------------------------------------------

    def __enter__(self) -> BootedNode:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _cgroups(self) -> list[Path]:
        return [CGROUP_ROOT / h / self.name for h in NSPAWN_HIERARCHIES]

    def _enter_cgroups(self) -> None:
        """(In the child, before exec) move into this node's own cgroups."""
        for cgroup in self._cgroups():
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    def start(self) -> None:
        """Unpack the root, boot it, and wait until its systemd says the system is up."""
        self.root.mkdir(parents=True)
        subprocess.run(["tar", "--numeric-owner", "--xattrs", "-I", "zstd", "-C", str(self.root), "-xf", str(self.tarball)],
                       check=True, capture_output=True)  # fmt: skip
        for cgroup in self._cgroups():
            cgroup.mkdir()
        argv = ["systemd-nspawn", "-D", str(self.root), f"--machine={self.name}", "--boot", "--register=no", "--keep-unit",
                "--console=passive", "--private-network"]  # fmt: skip
        with open(self.log, "wb") as log:
            self.nspawn = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "SYSTEMD_SECCOMP": "0"}, preexec_fn=self._enter_cgroups,
            )  # fmt: skip
        self.pid1 = self._wait_for_pid1()
        self.wait_until_up()

    def _wait_for_pid1(self, timeout: float = 60) -> int:
        assert self.nspawn is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.nspawn.poll() is not None:
                raise AssertionError(f"systemd-nspawn exited {self.nspawn.returncode}: {self.log.read_text()[-3000:]}")
            for child in _children(self.nspawn.pid):
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                        return child
            time.sleep(0.2)
        raise AssertionError(f"the node's systemd did not start: {self.log.read_text()[-3000:]}")

    def wait_until_up(self, timeout: float = 120) -> None:
        """Until ``systemctl is-system-running`` says running (or degraded: a unit failed, the tests look at which)."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.5)
        raise AssertionError(f"the node did not finish booting (state {state!r}): {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """Power the node off through nspawn, kill what is left by PID, remove its cgroups and root."""
        if self.nspawn is not None and self.nspawn.poll() is None:
            self.nspawn.send_signal(signal.SIGTERM)  # nspawn: the node's systemd powers off
            try:
                self.nspawn.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.nspawn.pid, signal.SIGKILL)
                self.nspawn.wait(timeout=30)
        for cgroup in self._cgroups():
            self._remove_cgroup(cgroup)
        with contextlib.suppress(FileNotFoundError):
            Path(f"/run/systemd/nspawn/propagate/{self.name}").rmdir()
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _remove_cgroup(top: Path) -> None:
        if not top.is_dir():
            return
        for _ in range(50):
            left = [int(p) for procs in top.rglob("cgroup.procs") for p in procs.read_text().split()]
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()

    # -- inside the node -------------------------------------------------------------------------

    def argv(self, *argv: str) -> list[str]:
        """``argv`` run in every namespace of the node, with a root shell's clean environment."""
        return ["nsenter", "-t", str(self.pid1), "-a", "env", "-i", f"PATH={NODE_PATH}", "HOME=/root", "LANG=C.UTF-8",
                *argv]  # fmt: skip

    def run(self, *argv: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the node; ``check``: fail the test, with its output, when it exits non-zero."""
        done = subprocess.run(self.argv(*argv), capture_output=True, text=True, timeout=timeout, check=False)
        if check:
            assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def path(self, node_path: str) -> Path:
        """Where the node's ``node_path`` is, seen from the host (its root is a plain directory)."""
        return self.root / node_path.lstrip("/")

    def main_pid(self, unit: str) -> int:
        """The unit's MainPID (0 when it does not run)."""
        return int(self.run("systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip() or 0)

    def active_state(self, unit: str) -> str:
        """``systemctl is-active UNIT``'s word (active, failed, activating, inactive, ...)."""
        return self.run("systemctl", "is-active", unit, check=False).stdout.strip()

    def socket(self, node_path: str) -> Path:
        """A unix socket of the node (in its own /run), reachable from the host through /proc."""
        return Path(f"/proc/{self.pid1}/root") / node_path.lstrip("/")
