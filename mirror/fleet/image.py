"""The DaemonSet's tools image, made here so that a site with only a registry needs nothing else.

``--tools host`` needs only ``sh``, ``wget``, ``cp`` and ``chroot``: the image is a static busybox (Debian's
``busybox-static``) with its applets linked under ``/bin``. ``--tools image`` needs python3, gpg, tar,
zstd and dpkg/rpm: the operator hands a root filesystem directory that has them (``debootstrap``'s, or
an unpacked image), and it is packed the same way. Either way no base image is pulled from anywhere.

:func:`build` returns the image as blobs (one gzip layer, the config, the OCI image manifest);
:func:`layout_archive` turns them into an OCI image layout in a tar (``oci-archive``), which
``ctr images import``, ``skopeo copy oci-archive:`` and ``podman load`` read; the CLI pushes the same
blobs to a registry with :mod:`installer.oci`. Layers are reproducible: sorted entries, owner root,
mtime 0, gzip without a timestamp, so the same input gives the same digests.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from plumbing.errors import UsageError

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
BUSYBOX_DIRS = ("bin", "etc", "tmp", "proc", "sys", "dev")


@dataclass(frozen=True)
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self) -> Dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}


@dataclass(frozen=True)
class Image:
    """One single-layer image: the manifest and the blobs it names."""

    manifest: Blob
    config: Blob
    layer: Blob

    def blobs(self) -> Tuple[Blob, ...]:
        return (self.layer, self.config, self.manifest)


Entry = Tuple[str, int, bytes, str]  #: path in the image, mode, file content, symlink target ("" for none)


def busybox_entries(busybox: bytes, applets: Sequence[str]) -> List[Entry]:
    """``/bin/busybox`` and a symlink per applet, plus the empty directories a container expects."""
    entries: List[Entry] = [(name, 0o40755, b"", "") for name in BUSYBOX_DIRS]
    entries.append(("bin/busybox", 0o100755, busybox, ""))
    entries += [
        (f"bin/{applet}", 0o120777, b"", "busybox")
        for applet in sorted(set(applets))
        if applet != "busybox" and "/" not in applet
    ]
    return entries


def tree_entries(root: Path) -> List[Entry]:
    """Every directory, regular file and symlink under ``root`` (other kinds are left out).

    :raises UsageError: when ``root`` is not a directory.
    """
    if not root.is_dir():
        raise UsageError(f"--rootfs {root} is not a directory")
    entries: List[Entry] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in [*dirnames, *sorted(filenames)]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                entries.append((rel, info.st_mode, b"", str(path.readlink())))
            elif stat.S_ISDIR(info.st_mode):
                entries.append((rel, info.st_mode, b"", ""))
            elif stat.S_ISREG(info.st_mode):
                entries.append((rel, info.st_mode, path.read_bytes(), ""))
    return entries


def _layer_tar(entries: Sequence[Entry]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, mode, data, target in sorted(entries, key=lambda e: e[0]):
            info = tarfile.TarInfo(path)
            info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = (
                stat.S_IMODE(mode),
                0,
                0,
                0,
                "root",
                "root",
            )
            if target:
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
            elif stat.S_ISDIR(mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def build(entries: Sequence[Entry], command: Sequence[str], arch: str = "amd64") -> Image:
    """The image of ``entries`` whose default command is ``command``."""
    tar = _layer_tar(entries)
    layer = Blob(LAYER_TYPE, gzip.compress(tar, compresslevel=9, mtime=0))
    config = {
        "architecture": arch,
        "os": "linux",
        "config": {
            "Cmd": list(command),
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
    }
    config_blob = Blob(CONFIG_TYPE, json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config_blob.descriptor(),
        "layers": [layer.descriptor()],
    }
    return Image(
        Blob(MANIFEST_TYPE, json.dumps(manifest, separators=(",", ":")).encode()), config_blob, layer
    )


def layout_archive(image: Image, tag: str) -> bytes:
    """An OCI image layout holding ``image`` under ``tag``, as one tar (what ``oci-archive:`` names)."""
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [{**image.manifest.descriptor(), "annotations": {REF_NAME: tag}}],
    }
    files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", json.dumps(index).encode())]
    files += [(f"blobs/sha256/{blob.digest.split(':', 1)[1]}", blob.data) for blob in image.blobs()]
    dirs = [("blobs", 0o40755, b"", ""), ("blobs/sha256", 0o40755, b"", "")]
    return _layer_tar(dirs + [(name, 0o100644, data, "") for name, data in files])


def is_static_elf(data: bytes) -> bool:
    """True for a 64-bit little-endian ELF executable without a program interpreter (statically linked).

    A dynamically linked busybox would need the node's libc inside an image that has none.
    """
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return False
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    phnum = int.from_bytes(data[56:58], "little")
    for i in range(phnum):
        start = phoff + i * phentsize
        if int.from_bytes(data[start : start + 4], "little") == 3:  # PT_INTERP
            return False
    return True
