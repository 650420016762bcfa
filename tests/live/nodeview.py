"""A node's view of the machine: a private mount namespace where a scratch node root lies over the host.

The live tests configure a scratch root (``NODE/etc/containerd/config.toml``, ``NODE/usr/bin/...``,
``NODE/dev/nvidia0``) with gpu-airgap, exactly as ``--root`` is meant to be used for node images. To
run a real engine on that configuration without touching the host, the engine is started by
:func:`node_view_argv` in a new mount namespace (``unshare --mount --propagation private``) where:

- each of ``/usr/bin``, ``/etc``, ``/dev`` (and any other ``layers``) is an overlay of the host's
  directory with a private upper directory, and each entry of the node's directory is bound over
  it: the engine reads the node's files at their real paths (``/etc/containerd/config.toml`` and its
  ``conf.d`` imports, ``BinaryName = "/usr/bin/nvidia-container-runtime"``, CDI
  ``hostPath: /dev/nvidia0``), sees later edits of them at once, and what it writes elsewhere in
  those directories stays in the scratch directory;
- ``/run`` is a fresh tmpfs: shim sockets (``/run/containerd/s``), runc state and a system
  containerd's socket are private to the namespace, so a daemon the machine runs is neither seen
  nor touched;
- mounts made inside (container root filesystems, shm) are private and vanish when the last
  process of the namespace exits.

Submounts of an overlaid directory (``/dev/pts``, ``/dev/shm``) are bound into the overlay before it
is moved over the directory, so they stay usable.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path

#: what a daemon needs from the node root: its binaries, its configs, its device nodes
DEFAULT_LAYERS = ("/usr/bin", "/etc", "/dev")


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            # field 5 is the mount point, with octal escapes for blanks
            point = line.split()[4].encode().decode("unicode_escape")
            points.append(point)
    return points


def submounts(directory: str) -> list[str]:
    """Mount points directly below ``directory`` (their own submounts travel with ``--rbind``)."""
    below = sorted({p for p in _mount_points() if p.startswith(directory.rstrip("/") + "/")})
    direct: list[str] = []
    for point in below:
        if not any(point.startswith(parent + "/") for parent in direct):
            direct.append(point)
    return direct


def node_view_script(root: Path, scratch: Path, layers: Sequence[str] = DEFAULT_LAYERS) -> str:
    """The shell commands that build the view inside the new namespace (then ``exec "$@"``)."""
    q = shlex.quote
    lines = ["set -e"]
    for layer in layers:
        name = layer.strip("/").replace("/", "_")
        upper, work, merged = (scratch / f"{name}.{part}" for part in ("upper", "work", "merged"))
        for directory in (upper, work, merged):
            directory.mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={layer},upperdir={upper},workdir={work}"
        lines.append(f"mount -t overlay overlay -o {q(options)} {q(str(merged))}")
        for point in submounts(layer):
            lines.append(f"mount --rbind {q(point)} {q(str(merged) + point[len(layer) :])}")
        lines.extend(_bind_node_entries(root / layer.lstrip("/"), merged))
        lines.append(f"mount --move {q(str(merged))} {q(layer)}")
    lines.append("mount -t tmpfs -o mode=0755 tmpfs /run")
    lines.append('exec "$@"')
    return "\n".join(lines)


def _bind_node_entries(node_dir: Path, merged: Path) -> list[str]:
    """Bind each entry of the node's directory over the overlay (mount points land in its upper dir).

    Bind mounts, not overlay lower layers: a file gpu-airgap replaces atomically (a new inode) under
    a running daemon is seen at once through a bound directory, while an overlay may keep serving
    the old inode of a lower layer.
    """
    q = shlex.quote
    lines: list[str] = []
    if not node_dir.is_dir():
        return lines
    for entry in sorted(node_dir.iterdir()):
        target = q(str(merged / entry.name))
        if entry.is_symlink():
            lines.append(f"rm -rf {target}; cp -P {q(str(entry))} {target}")
        elif entry.is_dir():
            lines.append(f"mkdir -p {target}; mount --rbind {q(str(entry))} {target}")
        else:
            # a fresh placeholder: the host's entry may be a symlink (/etc/os-release) bind would follow
            lines.append(f"rm -rf {target}; : > {target}; mount --bind {q(str(entry))} {target}")
    return lines


def node_view_argv(
    root: Path, scratch: Path, argv: Sequence[str], layers: Sequence[str] = DEFAULT_LAYERS
) -> list[str]:
    """``argv`` wrapped so that it runs in the node's view of the machine (see the module docstring)."""
    script = node_view_script(root, scratch, layers)
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "node-view", *argv]


class PinnedNamespace:
    """The mount namespace of a process, held open so that its name stays its own until :meth:`close`.

    A namespace's name (``mnt:[4026532177]``) is an inode number the kernel gives to the next new
    namespace as soon as the last process and reference are gone. Processes found by a name read
    earlier could then be another test's: a daemon stopped on one worker killed the node view the
    other worker had just made. The open descriptor keeps the namespace, and so its number, alive.
    """

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self.name = os.readlink(f"/proc/self/fd/{fd}")

    @classmethod
    def of(cls, pid: int) -> PinnedNamespace | None:
        """Pin the mount namespace of ``pid``; None when the process is gone."""
        try:
            fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        return cls(fd)

    def pids(self) -> list[int]:
        """Every process in the namespace: what a stopped daemon left behind."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/mnt") == self.name:
                        found.append(int(entry))
        return found

    def close(self) -> None:
        """Let the namespace go (its mounts vanish once no process is left in it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def wrapper_on_path(directory: Path, name: str, argv_prefix: Sequence[str]) -> Iterator[Path]:
    """Put a ``name`` script in ``directory`` that execs ``argv_prefix + "$@"``; yields the directory.

    Used to make a client-side engine (podman) run in a node view when product code runs it by name.
    """
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / name
    script.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in argv_prefix) + ' "$@"\n')
    script.chmod(0o755)
    try:
        yield directory
    finally:
        script.unlink(missing_ok=True)
