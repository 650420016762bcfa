"""An unprivileged LXC container for the live tests: a busybox-static root filesystem, started by root with ``lxc-start``.

The container maps its ids to 100000-165535 (``lxc.idmap``), has no network (``lxc.net.0.type =
empty``) and runs ``/init``, which writes ``/ran`` and exits, so ``lxc-start -F`` returns when the
container is done. Everything lives under one node directory that the mapped root (uid 100000)
can traverse; LXC's hooks run as that uid, so whatever they write (a stand-in's record) must be in
a directory it may write. Cleanup is by the container's own name and PID: a container still
running at the timeout is stopped with ``lxc-stop -k`` and the cgroups LXC made for it
(``lxc.payload.NAME``, ``lxc.monitor.NAME``) are removed; ``lxc.pivot`` is shared (:mod:`tests.live.cgroups`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.live.cgroups import existing_cgroups, remove_cgroups

MAPPED_ROOT = 100000
BUSYBOX = Path("/bin/busybox")
HOOK = Path("/usr/share/lxc/hooks/nvidia")


@dataclass(frozen=True)
class LxcContainer:
    """One container: its directory (``LXCPATH/NAME``), config and root filesystem."""

    lxcpath: Path
    name: str

    @property
    def config(self) -> Path:
        return self.lxcpath / self.name / "config"

    @property
    def rootfs(self) -> Path:
        return self.lxcpath / self.name / "rootfs"

    def ran(self) -> bool:
        """The container's /init ran to its end."""
        return (self.rootfs / "ran").is_file()


def missing_reason() -> str:
    """Why LXC containers cannot be started here ("" when they can)."""
    if shutil.which("lxc-start") is None or not HOOK.is_file():
        return "lxc is not installed (scripts/install-system-tools installs it)"
    if not BUSYBOX.is_file():
        return "busybox-static is not installed"
    return ""


def unprivileged_container(lxcpath: Path, name: str, privileged: bool = False) -> LxcContainer:
    """Write ``LXCPATH/NAME/config`` and a busybox root filesystem owned by the mapped root."""
    container = LxcContainer(lxcpath, name)
    rootfs = container.rootfs
    for directory in ("bin", "proc", "sys", "dev", "tmp", "etc"):
        (rootfs / directory).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, rootfs / "bin/busybox")
    (rootfs / "bin/sh").symlink_to("busybox")
    (rootfs / "init").write_text("#!/bin/sh\necho ran > /ran\n")
    (rootfs / "init").chmod(0o755)
    for path in [rootfs, *rootfs.rglob("*")]:
        os.lchown(path, MAPPED_ROOT, MAPPED_ROOT)
    idmap = (
        "" if privileged else f"lxc.idmap = u 0 {MAPPED_ROOT} 65536\nlxc.idmap = g 0 {MAPPED_ROOT} 65536\n"
    )
    container.config.write_text(
        f"lxc.uts.name = {name}\nlxc.rootfs.path = dir:{rootfs}\n{idmap}lxc.net.0.type = empty\n"
        "lxc.apparmor.profile = unconfined\nlxc.mount.auto = proc:mixed sys:ro\nlxc.init.cmd = /init\n"
    )
    return container


def start(
    container: LxcContainer, path_first: Path, log: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``lxc-start -F`` the container with ``path_first`` first on PATH (where the hook finds nvidia-container-cli)."""
    (container.rootfs / "ran").unlink(missing_ok=True)
    # lxc.pivot, where lxc-start moves its monitor while it cleans up, is shared: the session removes it
    cgroups = [f"lxc.payload.{container.name}", f"lxc.monitor.{container.name}"]
    before = existing_cgroups(cgroups)
    env = dict(os.environ, PATH=f"{path_first}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    argv = [
        "lxc-start",
        "-n",
        container.name,
        "-P",
        str(container.lxcpath),
        "-F",
        "-l",
        "DEBUG",
        "-o",
        str(log),
    ]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        subprocess.run(
            ["lxc-stop", "-k", "-n", container.name, "-P", str(container.lxcpath)],
            check=False,
            capture_output=True,
        )
        process.kill()
        out, err = process.communicate()
    finally:
        remove_cgroups(cgroups, before)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)
