"""containerd and dockerd for the live tests, started in a node view on private roots and sockets.

Each daemon reads the node's configuration at its real path (``/etc/containerd/config.toml``,
``/etc/docker/daemon.json``) through :mod:`tests.live.nodeview`. Its root, state and socket live in
a short private directory (unix socket paths are limited to 108 bytes). Stopping is by the PID we
started: first every task and container is removed through the daemon, then SIGTERM (SIGKILL
after a grace period), then any process still in the daemon's mount namespace (shims) is killed
by PID, and the cgroups the containers used are removed. Nothing is matched by process name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Optional

from tests.live.cgroups import existing_cgroups, release_cgroups, unique_cgroup
from tests.live.nodeview import DEFAULT_LAYERS, PinnedNamespace, node_view_argv


def short_dir(prefix: str) -> Path:
    """A private directory with a short path under /tmp (room for socket names)."""
    return Path(tempfile.mkdtemp(prefix=f"gal-{prefix}-", dir="/tmp"))


def kill_until_gone(pids: Callable[[], Sequence[int]], timeout: float) -> None:
    """SIGKILL the processes ``pids()`` names, by PID, until it names none or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = pids()
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def kill_namespace(namespace: PinnedNamespace | None, timeout: float = 10) -> None:
    """SIGKILL every process still in ``namespace`` (by PID) until none is left, then let it go."""
    if namespace is not None:
        try:
            kill_until_gone(namespace.pids, timeout)
        finally:
            namespace.close()


def _run(
    argv: Sequence[str], timeout: float = 60, env: Optional[dict[str, str]] = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env, check=False)


class Daemon:
    """A daemon process in a node view; subclasses say how to start, probe and empty it."""

    name = "daemon"
    #: cgroups (top-level names) its containers may create, removed when it stops
    cgroups: tuple[str, ...] = ()
    #: host directories the daemon sees with the node's content on top (and private writes)
    layers: tuple[str, ...] = DEFAULT_LAYERS

    def __init__(self, node: Path, env: Optional[dict[str, str]] = None) -> None:
        self.node = node
        self.dir = short_dir(self.name)
        self.env = dict(os.environ, **(env or {}))
        self.log_path = self.dir / f"{self.name}.log"
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.namespace: PinnedNamespace | None = None
        self._log: Optional[IO[bytes]] = None
        self._cgroups_before: set[Path] = set()

    def argv(self) -> list[str]:
        """The daemon's own command line."""
        raise NotImplementedError

    def ready(self) -> bool:
        """True once the daemon answers on its socket."""
        raise NotImplementedError

    def empty(self) -> None:
        """Remove every container the daemon runs (before it is stopped)."""

    def start(self, timeout: float = 30) -> None:
        """Start in the node view and wait until it answers; raise with its log (and clean up) if it does not."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        self._cgroups_before = existing_cgroups(self.cgroups)
        self._log = open(self.log_path, "wb")  # noqa: SIM115  # the daemon writes it until stop()
        self.process = subprocess.Popen(
            node_view_argv(self.node, self.dir / "view", self.argv(), self.layers),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {self.log_tail()}")
            if self.ready():
                self.namespace = PinnedNamespace.of(self.process.pid)
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer within {timeout} s: {self.log_tail()}")

    def log_tail(self, size: int = 3000) -> str:
        """The end of the daemon's log."""
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-size:]
        return ""

    def stop(self) -> None:
        """Empty, stop by PID, kill what is left in its namespace, remove its cgroups and files."""
        try:
            if self.process is not None and self.process.poll() is None:
                with contextlib.suppress(Exception):
                    self.empty()
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
            self._kill_leftovers()
        finally:
            if self._log is not None:
                self._log.close()
            release_cgroups(self.cgroups, self._cgroups_before)
            shutil.rmtree(self.dir, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        kill_namespace(self.namespace)

    def __enter__(self) -> Daemon:
        """Start."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop."""
        self.stop()


class Containerd(Daemon):
    """containerd on ``DIR/root``, ``DIR/state`` and ``DIR/c.sock``; config from the node's /etc/containerd."""

    name = "containerd"
    #: /opt too: containerd's opt plugin creates /opt/containerd/{bin,lib}
    layers = (*DEFAULT_LAYERS, "/opt")

    def __init__(self, node: Path, env: Optional[dict[str, str]] = None, cgroup_parent: str = "") -> None:
        super().__init__(node, env)
        self.socket = self.dir / "c.sock"
        self.cgroup_parent = cgroup_parent or unique_cgroup()
        # a pod without a parent lands in /k8s.io/<id>, a shared cgroup the session removes
        self.cgroups = (self.cgroup_parent,)

    def argv(self) -> list[str]:
        """containerd with flags that override root, state and address of whatever config it reads."""
        return [
            "containerd",
            "--root",
            str(self.dir / "root"),
            "--state",
            str(self.dir / "state"),
            "--address",
            str(self.socket),
        ]

    def ctr(
        self, *args: str, namespace: str = "k8s.io", timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``ctr --address SOCKET --namespace NS ARGS``."""
        return _run(["ctr", "--address", str(self.socket), "--namespace", namespace, *args], timeout=timeout)

    def ready(self) -> bool:
        """``ctr version`` answers and the CRI plugin loaded."""
        if not self.socket.exists():
            return False
        plugins = self.ctr("plugins", "ls", timeout=10)
        return plugins.returncode == 0 and any(
            " cri " in line and line.split()[-1] == "ok" for line in plugins.stdout.splitlines()
        )

    def import_image(self, archive: Path) -> None:
        """``ctr -n k8s.io images import`` (where CRI looks for images)."""
        result = self.ctr("images", "import", str(archive))
        if result.returncode != 0:
            raise RuntimeError(f"ctr images import failed: {result.stderr}")

    def empty(self) -> None:
        """Kill and delete every task and container in every namespace."""
        namespaces = self.ctr("namespaces", "ls", "-q").stdout.split()
        for namespace in namespaces:
            for container in self.ctr("containers", "ls", "-q", namespace=namespace).stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", container, namespace=namespace)
                self.ctr("tasks", "rm", "-f", container, namespace=namespace)
                self.ctr("containers", "rm", container, namespace=namespace)


class Dockerd(Daemon):
    """dockerd reading the node's /etc/docker/daemon.json, which must point every path into :attr:`dir`.

    :func:`site_settings` gives those keys; the test merges them into the node's daemon.json
    before gpu-airgap edits it, as a node's own settings.
    """

    name = "dockerd"
    #: /var/lib too: dockerd's managed containerd and libnetwork touch it beyond data-root
    layers = (*DEFAULT_LAYERS, "/var/lib")

    def __init__(self, node: Path, env: Optional[dict[str, str]] = None) -> None:
        super().__init__(node, env)
        self.socket = self.dir / "d.sock"
        self.cgroup_parent = unique_cgroup()
        self.cgroups = (self.cgroup_parent,)

    def site_settings(self) -> dict[str, object]:
        """daemon.json keys for this machine: private paths, no iptables or bridge, cgroupfs."""
        return {
            "data-root": str(self.dir / "data"),
            "exec-root": str(self.dir / "exec"),
            "pidfile": str(self.dir / "docker.pid"),
            "hosts": [f"unix://{self.socket}"],
            "iptables": False,
            "ip6tables": False,
            "bridge": "none",
            "oom-score-adjust": 0,
            "exec-opts": ["native.cgroupdriver=cgroupfs"],  # no systemd as PID 1 here
            "cgroup-parent": f"/{self.cgroup_parent}",
        }

    def argv(self) -> list[str]:
        """dockerd with no flags: everything comes from the node's daemon.json."""
        return ["dockerd"]

    def docker(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``docker ARGS`` against this daemon (DOCKER_HOST)."""
        env = dict(os.environ, DOCKER_HOST=f"unix://{self.socket}")
        return _run(["docker", *args], timeout=timeout, env=env)

    def ready(self) -> bool:
        """``docker version`` reaches the daemon."""
        return (
            self.socket.exists()
            and self.docker("version", "--format", "{{.Server.Version}}", timeout=10).returncode == 0
        )

    def reload(self) -> None:
        """``kill -HUP``: dockerd re-reads daemon.json (runtimes included)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)

    def empty(self) -> None:
        """Remove every container."""
        ids = self.docker("ps", "-aq").stdout.split()
        if ids:
            self.docker("rm", "-f", *ids)


def podman_config(directory: Path) -> dict[str, str]:
    """containers.conf and storage.conf for a podman on private storage; returns the env that selects them.

    podman 4.3 here: runc (crun fails on this hybrid cgroup setup), cgroupfs (no systemd), file
    events, and ulimits the VM allows (no CAP_SYS_RESOURCE to raise them).
    """
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{directory}/root"\nrunroot = "{directory}/run"\n'
    )
    (directory / "containers.conf").write_text(
        "[containers]\n"
        'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
        f'[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\nruntime = "runc"\n'
        f'tmp_dir = "{directory}/tmp"\nvolume_path = "{directory}/volumes"\n'
        f'static_dir = "{directory}/root/libpod"\n'
    )
    return {
        "CONTAINERS_CONF": str(directory / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(directory / "storage.conf"),
    }


class PodmanView:
    """podman on private storage, every call in one node view (one mount namespace).

    One namespace for all calls matters: podman keeps runc's state under ``/run`` (a tmpfs of the
    view), so a container started by one call can only be stopped by a call in the same view. A
    ``sleep`` holds the namespace; calls enter it with ``nsenter --mount``.
    """

    def __init__(self, node: Path, layers: Sequence[str] = ()) -> None:
        self.node = node
        self.layers = (*DEFAULT_LAYERS, "/var/lib", *layers)  #: e.g. /usr/share/containers for its hooks.d
        self.dir = short_dir("podman")
        self.env = dict(os.environ, **podman_config(self.dir))
        self.cgroup_parent = unique_cgroup()
        # a container without --cgroup-parent lands in libpod_parent, a shared cgroup the session removes
        self.cgroups = (self.cgroup_parent,)
        self._before = existing_cgroups(self.cgroups)
        self.holder: Optional[subprocess.Popen[bytes]] = None
        self.namespace: PinnedNamespace | None = None

    def start(self, timeout: float = 10) -> None:
        """Build the view around a ``sleep`` and wait until it is in place (cleaning up if it is not)."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        argv = node_view_argv(self.node, self.dir / "view", ["sleep", "infinity"], self.layers)
        self.holder = subprocess.Popen(argv, start_new_session=True, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{self.holder.pid}/comm").read_text().strip() == "sleep":
                    self.namespace = PinnedNamespace.of(self.holder.pid)
                    return
            if self.holder.poll() is not None:
                error = self.holder.stderr.read().decode(errors="replace") if self.holder.stderr else ""
                raise RuntimeError(f"the podman node view failed: {error}")
            time.sleep(0.02)
        raise RuntimeError("the podman node view did not come up")

    def argv(self, *args: str) -> list[str]:
        """``podman ARGS`` inside the view."""
        assert self.holder is not None
        return ["nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt", "--", "/usr/bin/podman", *args]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``podman ARGS`` in the view with the private configuration."""
        return _run(self.argv(*args), timeout=120, env=self.env)

    def stop(self) -> None:
        """Remove every container, then end the view (by PID) and remove its cgroups and files."""
        try:
            if self.holder is not None and self.holder.poll() is None:
                self.run("rm", "--all", "--force", "--time", "0")
                self.holder.kill()
                self.holder.wait(timeout=10)
            if self.holder is not None and self.holder.stderr is not None:
                self.holder.stderr.close()
            kill_namespace(self.namespace)
        finally:
            release_cgroups(self.cgroups, self._before)
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PodmanView:
        """Start."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop."""
        self.stop()
