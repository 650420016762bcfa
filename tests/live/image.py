"""A container image made here from Debian's busybox-static, never pulled from a registry.

``rootfs.tar`` is the root filesystem (for ``docker import``); ``image.tar`` is the same as a
docker-archive image (for ``ctr images import`` and ``podman load``), built with umoci (an OCI
layout, one layer, the config) and skopeo (layout -> archive). skopeo runs in a node view whose
``/var/lib`` is private, because it writes its blob-info cache to ``/var/lib/containers/cache``
when run as root.

The default command behaves like the Kubernetes pause image: it runs until SIGTERM and then exits
0, so the image also serves as containerd's ``sandbox_image``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from tests.live.cache import cached_dir, digest
from tests.live.nodeview import node_view_argv

BUSYBOX = Path("/bin/busybox")
REPOSITORY = "localhost/gpu-airgap-tests/busybox"
#: a pause: wait for SIGTERM/SIGINT, then exit 0
PAUSE_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; sleep 2147483647 & wait"]
#: bump when the recipe changes, so the cache is rebuilt
RECIPE = "1"


@dataclass(frozen=True)
class LocalImage:
    """The cached image: its name and the two tarballs."""

    ref: str
    rootfs_tar: Path
    archive: Path


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")


def _is_static(binary: Path) -> bool:
    result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    return "not a dynamic executable" in result.stdout + result.stderr


def busybox_version() -> str:
    """The busybox version on this machine (``1.35.0``), which names the image's tag."""
    banner = subprocess.run([str(BUSYBOX)], capture_output=True, text=True, check=False).stdout
    return banner.split()[1].lstrip("v") if banner.startswith("BusyBox") else "unknown"


def _rootfs(dest: Path) -> None:
    (dest / "bin").mkdir(parents=True)
    for name in ("etc", "tmp", "proc", "sys", "dev"):
        (dest / name).mkdir()
    (dest / "bin/busybox").write_bytes(BUSYBOX.read_bytes())
    (dest / "bin/busybox").chmod(0o755)
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout
    for applet in applets.split():
        if applet != "busybox":
            (dest / "bin" / applet).symlink_to("busybox")


def _build(out: Path, ref: str) -> None:
    rootfs = out / "rootfs"
    _rootfs(rootfs)
    with tarfile.open(out / "rootfs.tar", "w") as tar:
        tar.add(rootfs, arcname=".")
    layout = f"{out}/layout"
    _run(["umoci", "init", "--layout", layout])
    _run(["umoci", "new", "--image", f"{layout}:t"])
    _run(["umoci", "insert", "--image", f"{layout}:t", str(rootfs), "/"])
    config = ["umoci", "config", "--image", f"{layout}:t"]
    for part in PAUSE_COMMAND:
        config += ["--config.cmd", part]
    _run(config)
    copy = ["skopeo", "copy", "--quiet", f"oci:{layout}:t", f"docker-archive:{out}/image.tar:{ref}"]
    _run(node_view_argv(out / "empty-node", out / "view", copy, layers=("/var/lib",)))
    (out / "image.json").write_text(json.dumps({"ref": ref, "cmd": PAUSE_COMMAND}))
    for leftover in ("rootfs", "layout", "view", "empty-node"):
        shutil.rmtree(out / leftover, ignore_errors=True)


def busybox_image() -> LocalImage:
    """The image, built once per busybox binary and recipe."""
    if not _is_static(BUSYBOX):
        raise RuntimeError(f"{BUSYBOX} is not statically linked; install busybox-static")
    ref = f"{REPOSITORY}:{busybox_version()}"
    key = digest(BUSYBOX.read_bytes(), ref, RECIPE, json.dumps(PAUSE_COMMAND))
    final = cached_dir("live-image", key, lambda scratch: _build(scratch, ref))
    return LocalImage(ref, final / "rootfs.tar", final / "image.tar")
