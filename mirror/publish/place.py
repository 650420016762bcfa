"""Put files into a tree being published: mirror files by hard link (else copy), each checked against
the digest the mirror recorded from signed metadata; generated files written whole.

Hard links make publishing a large mirror fast and free of extra disk space. They alias the
mirror's inodes, so an in-place edit of a mirror file would show in the published tree too; the
mirror never edits in place (sync moves new files over old names with ``os.replace``, prune
unlinks), so a published file keeps its bytes until the next publish replaces the tree. Linked
files keep the mirror's owner and mode (0644 as sync creates them).
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Final

from mirror.disk.store import StoredFile
from plumbing.errors import ChecksumMismatch, ToolError
from plumbing.fsutil import atomic_write, safe_join
from plumbing.progress import Meter, NoMeter

_CHUNK: Final = 1 << 20
#: link() errors that mean "cannot link here" rather than "something is wrong": copy instead.
_NO_LINK: Final = (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES)


class MirrorFileChanged(ChecksumMismatch):
    """A mirror file no longer holds the bytes it was verified with."""

    def __init__(self, path: str, expected: str, actual: str) -> None:
        super().__init__(path, expected, actual)
        self.args = (
            f"{path} in the mirror no longer matches its recorded checksum (expected {expected}, got {actual}); "
            "nothing was published: run `gpu-airgap mirror verify` and sync again",
        )


class Placer:
    """Places files under ``tree`` and counts them."""

    def __init__(self, mirror: Path, tree: Path, meter: Meter | None = None) -> None:
        """Copy from mirror ``mirror`` into the (empty) directory ``tree``, telling ``meter`` the bytes placed."""
        self.mirror = mirror
        self.tree = tree
        self.meter = meter or NoMeter()
        self.files = 0
        self.bytes = 0
        self.linked = 0

    def place(self, stored: StoredFile, relative: str) -> tuple[Path, str]:
        """Link or copy mirror file ``stored`` to ``tree/relative`` and check it; returns (path, sha256).

        :raises MirrorFileChanged: when its size or digest differs from the recorded one.
        """
        if not (stored.sha512 or stored.sha256):
            raise ToolError(f"the mirror recorded no checksum for {stored.path}; sync the mirror again")
        source = stored.local_path(self.mirror)
        target = safe_join(self.tree, relative)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
                linked = True
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                linked = False
            sha256, sha512, size = _copy_hashing(source, None if linked else target)
        except FileNotFoundError:
            raise ToolError(
                f"{stored.path} is missing from the mirror; nothing was published: run `gpu-airgap mirror verify` and sync again"
            ) from None
        except OSError as exc:
            raise ToolError(f"cannot publish {stored.path}: {exc.strerror or exc}") from exc
        if size != stored.size:
            raise MirrorFileChanged(stored.path, f"{stored.size} bytes", f"{size} bytes")
        for algo, recorded, actual in (("sha512", stored.sha512, sha512), ("sha256", stored.sha256, sha256)):
            if recorded and recorded != actual:
                raise MirrorFileChanged(stored.path, f"{algo} {recorded[:16]}…", f"{actual[:16]}…")
        self.files += 1
        self.bytes += size
        self.meter.advance(size)
        self.linked += linked
        return target, sha256

    def write(self, relative: str, data: bytes, epoch: int | None) -> None:
        """Write generated ``data`` to ``tree/relative`` (mtime ``epoch`` when given, for reproducible trees)."""
        target = safe_join(self.tree, relative)
        atomic_write(target, data, mode=0o644)
        if epoch is not None:
            os.utime(target, (epoch, epoch))
        self.files += 1
        self.bytes += len(data)


def _copy_hashing(source: Path, target: Path | None) -> tuple[str, str, int]:
    """sha256, sha512 and size of ``source``, copied to ``target`` in the same pass when given."""
    sha256, sha512, size = hashlib.sha256(), hashlib.sha512(), 0
    with open(source, "rb") as src:
        dst = open(target, "xb") if target is not None else None  # noqa: SIM115 - closed below
        try:
            while block := src.read(_CHUNK):
                sha256.update(block)
                sha512.update(block)
                size += len(block)
                if dst is not None:
                    dst.write(block)
        finally:
            if dst is not None:
                dst.close()
    if target is not None:
        os.chmod(target, 0o644)
    return sha256.hexdigest(), sha512.hexdigest(), size
