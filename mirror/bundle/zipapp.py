"""Build ``gpu-airgap-node.pyz``: the node-side tool and its pure-Python dependencies in one zipapp.

The zipapp holds ``plumbing/``, ``configure/`` and ``installer/`` from this source tree plus the Python files of
the wheels pinned in ``mirror/bundle/data/node-wheels.txt`` (resolved for python3.9). Compiled modules
(``*.so``, e.g. PyYAML's optional ``_yaml``) are left out, so it runs on any node arch with
``python3 -I -S gpu-airgap-node.pyz`` — no site-packages, no pip, no network. Its ``__main__.py`` is
:mod:`installer.zipapp_main`, which extracts the zip once into a private cache so Python can keep
bytecode (a zip cannot hold ``__pycache__``), and runs from there.

The wheels are in the package (``mirror/bundle/data/wheels``, installed with it), each pinned by the
sha256 in ``node-wheels.txt``; :func:`vendored_wheels` checks them before a byte of one is read, so a
build never downloads anything and a changed wheel is refused.
The zip is deterministic: sorted entries, fixed timestamps and modes, fixed compression level.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from installer.nodecheck import NODE_TOOL
from mirror.hostenv import node_wheel_cache
from plumbing.errors import VerificationError
from plumbing.fsutil import atomic_write

PYZ_NAME: Final = NODE_TOOL
#: 1980-01-01 00:00 UTC, the earliest time a zip entry can carry
ZIP_EPOCH: Final = 315532800
#: ``name==version --hash=sha256:HEX`` per vendored wheel (pip's hash-checking requirements format)
LOCK: Final = Path(__file__).parent / "data" / "node-wheels.txt"
#: the vendored wheels, package data of ``mirror.bundle``
WHEELS: Final = Path(__file__).parent / "data" / "wheels"
_HASH: Final = "--hash=sha256:"
_SOURCE_ROOT: Final = Path(__file__).resolve().parents[2]
_NODE_PACKAGES: Final = ("plumbing", "configure", "installer")
#: the zipapp's __main__.py: extract once into a private cache, then import from there (bytecode caching)
_MAIN: Final = _SOURCE_ROOT / "installer" / "zipapp_main.py"


@dataclass(frozen=True)
class Wheel:
    """A wheel to carry: its file name and the bytes that were checked (read once, then only these)."""

    name: str
    data: bytes


@dataclass(frozen=True)
class Pin:
    """One line of the lock: a wheel's ``name==version`` and the sha256 of its file."""

    requirement: str
    sha256: str


def pinned_wheels(lock: Path = LOCK) -> list[Pin]:
    """The pins of ``lock``.

    :raises VerificationError: when a line pins no sha256.
    """
    pins = []
    for line in lock.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        requirement, _, digest = line.partition(f" {_HASH}")
        if len(digest) != 64:
            raise VerificationError(f"{lock}: {line.strip()!r} pins no sha256 ({_HASH}HEX)")
        pins.append(Pin(requirement.strip(), digest))
    return pins


def _wheel_for(directory: Path, requirement: str) -> Path | None:
    name, _, version = requirement.partition("==")
    stem = name.lower().replace("-", "_")
    for wheel in sorted(directory.glob("*.whl")):
        parts = wheel.name.split("-")
        if parts[0].lower() == stem and parts[1] == version:
            return wheel
    return None


def vendored_wheels(directory: Path = WHEELS, lock: Path = LOCK) -> list[Wheel]:
    """The wheels ``lock`` pins, found in ``directory`` and each checked against its sha256.

    Only pinned wheels are read; another file there is never carried.

    :raises VerificationError: a pinned wheel is missing or differs from its pin: the installation of
        gpu-airgap is damaged, and no bundle is built from it.
    """
    wheels = []
    for pin in pinned_wheels(lock):
        wheel = _wheel_for(directory, pin.requirement)
        if wheel is None:
            raise VerificationError(
                f"the node wheel {pin.requirement} is not in {directory}; reinstall gpu-airgap (pip install .)"
            )
        data = wheel.read_bytes()
        actual = hashlib.sha256(data).hexdigest()
        if actual != pin.sha256:
            raise VerificationError(
                f"the node wheel {wheel.name} does not match its sha256 in {lock} (expected "
                f"{pin.sha256[:16]}…, got {actual[:16]}…); reinstall gpu-airgap from an unchanged checkout"
            )
        wheels.append(Wheel(wheel.name, data))
    return wheels


def _node_sources() -> dict[str, bytes]:
    entries: dict[str, bytes] = {"__main__.py": _MAIN.read_bytes()}
    for package in _NODE_PACKAGES:
        for path in sorted((_SOURCE_ROOT / package).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".typed") and "__pycache__" not in path.parts:
                entries[path.relative_to(_SOURCE_ROOT).as_posix()] = path.read_bytes()
    return entries


def build_zipapp(*, epoch: int, cache: Path | None = None, wheels: Sequence[Wheel] | None = None) -> bytes:
    """Return the bytes of ``gpu-airgap-node.pyz``, reusing an identical earlier build from the cache.

    The zip is a pure function of the node sources, the wheels and ``epoch``, so a build is cached
    under the hash of those inputs (re-deflating ~2 MB costs a third of a second).

    :param epoch: timestamp of every entry (clamped to 1980, the zip format's start).
    :param cache: where built zipapps are kept (default :func:`~mirror.hostenv.node_wheel_cache`).
    :param wheels: the wheels to carry (default :func:`vendored_wheels`, checked against the lock);
        a set given here is built each time, never cached, so it evicts no shared build.
    :raises VerificationError: a vendored wheel is missing or changed.
    """
    epoch = max(epoch, ZIP_EPOCH)
    sources = _node_sources()
    if wheels is not None:
        return _build(sources, list(wheels), epoch)
    cache = cache or node_wheel_cache()
    wheels = vendored_wheels()
    key = hashlib.sha256(f"pyz-v2 {epoch}\n".encode())
    for name, data in sorted(sources.items()):
        key.update(f"{name} {len(data)}\n".encode() + data)
    for wheel in wheels:
        key.update(f"{wheel.name} {hashlib.sha256(wheel.data).hexdigest()}\n".encode())
    cached = cache / f"pyz-{key.hexdigest()[:32]}.pyz"
    with contextlib.suppress(FileNotFoundError):  # absent, or evicted by another build meanwhile
        return cached.read_bytes()
    data = _build(sources, wheels, epoch)
    cache.mkdir(parents=True, exist_ok=True)
    atomic_write(cached, data)
    for old in cache.glob("pyz-*.pyz"):  # keep only the newest build
        if old != cached:
            old.unlink(missing_ok=True)
    return data


def _build(entries: dict[str, bytes], wheels: list[Wheel], epoch: int) -> bytes:
    entries = dict(entries)
    for wheel in wheels:
        with zipfile.ZipFile(io.BytesIO(wheel.data)) as zf:
            for info in zf.infolist():
                name = info.filename
                top = name.split("/", 1)[0]
                # dist-info stays: importlib.metadata.version() (annotated-doc, typer) reads it from the zip.
                if (
                    info.is_dir()
                    or top.endswith(".data")
                    or name.endswith((".so", ".pyd", ".pyc", "/RECORD"))
                ):
                    continue
                entries[name] = zf.read(info)
    stamp = time.gmtime(epoch)[:6]
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as out:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            out.writestr(info, entries[name])
    return buffer.getvalue()
