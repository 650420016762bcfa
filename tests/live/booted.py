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
from typing import Callable, Optional

from installer.nodecheck import HEAD
from tests.live.cache import cached_dir, digest
from tests.live.cgroups import remove_cgroup_tree
from tests.live.cri import CriClient
from tests.live.daemons import kill_until_gone
from tests.upstream import UpstreamServer

REPO_ROOT = Path(__file__).resolve().parents[2]
PREPARE = REPO_ROOT / "scripts" / "prepare-debootstrap-cache"
CACHE = (
    Path(os.environ.get("GPU_AIRGAP_TEST_CACHE") or Path.home() / ".cache" / "gpu-airgap-tests")
    / "debootstrap"
)
NODE_REPO = CACHE / "node-repo"
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: the hierarchies nspawn makes its payload/supervisor cgroups in when the host has no systemd
NSPAWN_HIERARCHIES = ("systemd", "unified")
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: where the admin put the bundle, the operator's key and the node files taken out of the bundle
NODE_DIR = "/root/node"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
GATE = "/etc/systemd/system/containerd.service.d/site-gate.conf"
GATE_UNIT = """[Service]
# site policy: containerd does not start with NVIDIA's runtime in its config
ExecStartPre=/bin/sh -c '! grep -q nvidia-container-runtime /etc/containerd/config.toml'
"""
#: bump when the root's own set-up (``_prepare_root``) changes, so cached roots are rebuilt
RECIPE = "3"


def node_packages() -> str:
    """The packages the booted root adds to minbase: the cache script's list, so both agree."""
    match = re.search(r'^NODE_PACKAGES="([^"]+)"', PREPARE.read_text(), re.M)
    assert match, f"{PREPARE} no longer sets NODE_PACKAGES"
    return match.group(1)


def _suite() -> str:
    fields = dict(
        line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line
    )
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
    # sshd runs per connection (sshd -i through nsenter), never as a listening service; its
    # privilege separation directory is made at boot, as ssh.service would have made it
    (root / "etc/systemd/system/multi-user.target.wants/ssh.service").unlink(missing_ok=True)
    (root / "etc/systemd/system/sshd.service").unlink(missing_ok=True)
    (root / "etc/tmpfiles.d").mkdir(exist_ok=True)
    (root / "etc/tmpfiles.d/sshd.conf").write_text("d /run/sshd 0755 root root -\n")


def _build_tarball(scratch: Path) -> None:
    root = scratch / "root"
    suite = _suite()
    with UpstreamServer(NODE_REPO) as server:
        done = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={node_packages()}",
                "--no-check-gpg",
                suite,
                str(root),
                server.url + "/",
            ],
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _prepare_root(root)
    subprocess.run(
        [
            "tar",
            "--numeric-owner",
            "--xattrs",
            "-I",
            "zstd -T0 -3",
            "-C",
            str(root),
            "-cf",
            str(scratch / "root.tar.zst"),
            ".",
        ],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(root)


def node_tarball() -> Path:
    """The booted node's root as a tarball, debootstrapped once per node-repo and recipe."""
    debootstrap = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "debootstrap"], capture_output=True, text=True, check=False
    )
    release = (NODE_REPO / "dists" / _suite() / "Release").read_bytes()
    key = digest(RECIPE, debootstrap.stdout, release)
    tarball = cached_dir("booted-node", key, _build_tarball) / "root.tar.zst"
    _prune(tarball.parent)
    return tarball


def _prune(current: Path, unused_for: float = 2 * 24 * 3600) -> None:
    """Remove roots of other keys not touched for ``unused_for`` seconds (another checkout may still use a recent one)."""
    os.utime(current)
    for other in current.parent.iterdir():
        if other.is_dir() and other != current and time.time() - other.stat().st_mtime > unused_for:
            shutil.rmtree(other, ignore_errors=True)
            other.with_name(other.name + ".lock").unlink(missing_ok=True)


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

    def __init__(self, work: Path, tarball: Path, prepare: Optional[Callable[[Path], None]] = None) -> None:
        """``prepare``: called with the unpacked root before it boots (an image built with ``--root``)."""
        self.work = work
        self.prepare = prepare
        self.root = work / "root"
        self.name = f"gal-node-{os.getpid()}-{os.urandom(3).hex()}"
        self.log = work / "nspawn.log"
        self.tarball = tarball
        self.nspawn: Optional[subprocess.Popen[bytes]] = None
        self.pid1 = 0
        #: the cgroup parent of the pods a test runs in the node (see :meth:`allow_pods`)
        self.pod_cgroup = f"gal-pods-{os.urandom(3).hex()}"

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

    def start(self) -> None:
        """Unpack the root, boot it, and wait until its systemd says the system is up."""
        self.root.mkdir(parents=True)
        subprocess.run(
            [
                "tar",
                "--numeric-owner",
                "--xattrs",
                "-I",
                "zstd",
                "-C",
                str(self.root),
                "-xf",
                str(self.tarball),
            ],
            check=True,
            capture_output=True,
        )
        if self.prepare is not None:
            self.prepare(self.root)
        for cgroup in self._cgroups():
            cgroup.mkdir()
        # a small shell moves itself into the node's cgroups, then becomes nspawn (a preexec_fn is not
        # safe with the test server's threads)
        enter = 'echo $$ > "$0" && echo $$ > "$1" && shift && exec "$@"'
        procs = [str(cgroup / "cgroup.procs") for cgroup in self._cgroups()]
        argv = [
            "sh",
            "-c",
            enter,
            *procs,
            "systemd-nspawn",
            "-D",
            str(self.root),
            f"--machine={self.name}",
            "--boot",
            "--register=no",
            "--keep-unit",
            "--console=passive",
            "--private-network",
        ]
        with open(self.log, "wb") as log:
            self.nspawn = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "SYSTEMD_SECCOMP": "0"},
            )
        self.pid1 = self._wait_for_pid1()
        self.wait_until_up()

    def _wait_for_pid1(self, timeout: float = 60) -> int:
        assert self.nspawn is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.nspawn.poll() is not None:
                raise AssertionError(
                    f"systemd-nspawn exited {self.nspawn.returncode}: {self.log.read_text()[-3000:]}"
                )
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
        raise AssertionError(
            f"the node did not finish booting (state {state!r}): {self.log.read_text()[-3000:]}"
        )

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
        for cgroup in self._cgroups() + self._pod_cgroups():
            self._remove_cgroup(cgroup)
        with contextlib.suppress(FileNotFoundError):
            Path(f"/run/systemd/nspawn/propagate/{self.name}").rmdir()
        shutil.rmtree(self.root, ignore_errors=True)

    def _pod_cgroups(self) -> list[Path]:
        """The pods' cgroups as the host sees them: the node's v1 controllers are rooted where nspawn ran
        (the memory one is not the host's root here), so they are looked for a few levels down."""
        found: list[Path] = []
        for hierarchy in (p for p in CGROUP_ROOT.iterdir() if p.name not in NSPAWN_HIERARCHIES):
            for depth in range(4):
                found += hierarchy.glob("/".join(["*"] * depth + [self.pod_cgroup]))
        return found

    def allow_pods(self) -> None:
        """Let runc in the node make cgroups: nspawn mounts the v1 controllers read-only in it."""
        mounts = self.run("findmnt", "-rn", "-t", "cgroup", "-o", "TARGET").stdout.split()
        for target in mounts:
            if Path(target).name not in NSPAWN_HIERARCHIES:
                self.run("mount", "-o", "remount,bind,rw", target)

    @staticmethod
    def _remove_cgroup(top: Path) -> None:
        if top.is_dir():
            kill_until_gone(
                lambda: [int(p) for procs in top.rglob("cgroup.procs") for p in procs.read_text().split()], 5
            )
            remove_cgroup_tree(top)

    # -- inside the node -------------------------------------------------------------------------

    def argv(self, *argv: str) -> list[str]:
        """``argv`` run in every namespace of the node, with a root shell's clean environment."""
        return [
            "nsenter",
            "-t",
            str(self.pid1),
            "-a",
            "env",
            "-i",
            f"PATH={NODE_PATH}",
            "HOME=/root",
            "LANG=C.UTF-8",
            *argv,
        ]

    def run(self, *argv: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the node; ``check``: fail the test, with its output, when it exits non-zero."""
        done = subprocess.run(self.argv(*argv), capture_output=True, text=True, timeout=timeout, check=False)
        if check:
            assert done.returncode == 0, (
                f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
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

    def authorize(self, public_key: Path) -> None:
        """Let ssh log in as root with ``public_key``."""
        ssh = self.path("/root/.ssh")
        ssh.mkdir(mode=0o700, exist_ok=True)
        (ssh / "authorized_keys").write_bytes(public_key.read_bytes())
        (ssh / "authorized_keys").chmod(0o600)

    def ssh_proxy(self) -> str:
        """An ssh ``ProxyCommand`` that is the node's own sshd, serving one connection on stdin/stdout.

        The node has no network the host can reach (``--private-network``), so ssh does not connect
        to a port: each connection is a fresh ``sshd -i`` (inetd mode) in the node's namespaces.
        """
        return f"nsenter -t {self.pid1} -a env -i PATH={NODE_PATH} /usr/sbin/sshd -i"

    def socket(self, node_path: str) -> Path:
        """A unix socket of the node (in its own /run), reachable from the host through /proc."""
        return Path(f"/proc/{self.pid1}/root") / node_path.lstrip("/")


def hand_over(node: BootedNode, bundle: Path, operator_key: Path) -> None:
    """What the admin copies to the node: the bundle, the operator's key, and the node files from the bundle."""
    work = node.path(NODE_DIR)
    work.mkdir()
    subprocess.run(["tar", "--occurrence", "-xf", str(bundle), *HEAD], cwd=work, check=True)
    (work / "bundle.tar.zst").write_bytes(bundle.read_bytes())
    (work / "operator.asc").write_bytes(operator_key.read_bytes())
    assert node.active_state("containerd") == "active"


def runtime_handlers(node: BootedNode, log_dir: Path) -> set[str]:
    """The runtime handlers the node's running containerd loaded, asked over its CRI socket."""
    client = CriClient(node.socket(CONTAINERD_SOCKET), log_dir, "")
    try:
        return client.runtime_handlers()
    finally:
        client.close()


def gate_containerd(node: BootedNode) -> None:
    """From now on containerd does not start while its config names NVIDIA's runtime (:data:`GATE_UNIT`)."""
    node.path(GATE).parent.mkdir(parents=True, exist_ok=True)
    node.path(GATE).write_text(GATE_UNIT)
    node.run("systemctl", "daemon-reload")


def ungate_containerd(node: BootedNode) -> None:
    """Take :func:`gate_containerd`'s drop-in away again."""
    node.path(GATE).unlink()
    node.run("systemctl", "daemon-reload")
