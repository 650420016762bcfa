"""Build ``gpu-airgap-node.pyz``: the node-side tool and its pure-Python dependencies in one zipapp.

The zipapp holds ``plumbing/``, ``configure/`` and ``installer/`` from this source tree plus the Python files of
the wheels pinned in ``mirror/bundle/data/node-wheels.txt`` (resolved for python3.9). Compiled modules
(``*.so``, e.g. PyYAML's optional ``_yaml``) are left out, so it runs on any node arch with
``python3 -I -S gpu-airgap-node.pyz`` — no site-packages, no pip, no network. Its ``__main__.py`` is
:mod:`installer.zipapp_main`, which extracts the zip once into a private cache so Python can keep
bytecode (a zip cannot hold ``__pycache__``), and runs from there.

Wheels come from a cache directory (``GPU_AIRGAP_WHEEL_CACHE``, default
``~/.cache/gpu-airgap/node-wheels``); :func:`ensure_wheels` fills it with
``pip download --only-binary=:all: --python-version 3.9 --no-deps`` on the connected host
(``make nodewheels`` does this before the tests, which never touch the network).
The zip is deterministic: sorted entries, fixed timestamps and modes, fixed compression level.
"""

from __future__ import annotations

import hashlib
import io
import sys
import time
import zipfile
from pathlib import Path
from typing import Final

from installer.nodecheck import NODE_TOOL
from mirror.hostenv import node_wheel_cache
from plumbing.errors import ToolError
from plumbing.fsutil import atomic_write
from plumbing.proc import run

PYZ_NAME: Final = NODE_TOOL
#: 1980-01-01 00:00 UTC, the earliest time a zip entry can carry
ZIP_EPOCH: Final = 315532800
_PINS: Final = Path(__file__).parent / "data" / "node-wheels.txt"
_SOURCE_ROOT: Final = Path(__file__).resolve().parents[2]
_NODE_PACKAGES: Final = ("plumbing", "configure", "installer")
#: the zipapp's __main__.py: extract once into a private cache, then import from there (bytecode caching)
_MAIN: Final = _SOURCE_ROOT / "installer" / "zipapp_main.py"


def pinned_requirements() -> list[str]:
    """The ``name==version`` lines of ``node-wheels.txt``."""
    lines = _PINS.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _wheel_for(cache: Path, requirement: str) -> Path | None:
    name, _, version = requirement.partition("==")
    stem = name.lower().replace("-", "_")
    for wheel in sorted(cache.glob("*.whl")):
        parts = wheel.name.split("-")
        if parts[0].lower().replace("-", "_") == stem and parts[1] == version:
            return wheel
    return None


def ensure_wheels(cache: Path | None = None) -> list[Path]:
    """Return the pinned wheels, downloading the missing ones with pip (connected host only).

    :raises ToolError: when pip cannot fetch a wheel.
    """
    cache = cache or node_wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    missing = [r for r in pinned_requirements() if _wheel_for(cache, r) is None]
    if missing:
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--only-binary=:all:",
                "--python-version",
                "3.9",
                "--no-deps",
                "--dest",
                str(cache),
                *missing,
            ],
            timeout=600,
        )
    wheels = []
    for requirement in pinned_requirements():
        wheel = _wheel_for(cache, requirement)
        if wheel is None:
            raise ToolError(
                f"the node wheel {requirement} is not in {cache}; run `make nodewheels` on a connected host"
            )
        wheels.append(wheel)
    return wheels


def _node_sources() -> dict[str, bytes]:
    entries: dict[str, bytes] = {"__main__.py": _MAIN.read_bytes()}
    for package in _NODE_PACKAGES:
        for path in sorted((_SOURCE_ROOT / package).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".typed") and "__pycache__" not in path.parts:
                entries[path.relative_to(_SOURCE_ROOT).as_posix()] = path.read_bytes()
    return entries


def build_zipapp(*, epoch: int, cache: Path | None = None) -> bytes:
    """Return the bytes of ``gpu-airgap-node.pyz``, reusing an identical earlier build from the cache.

    The zip is a pure function of the node sources, the pinned wheels and ``epoch``, so a build
    is cached under the hash of those inputs (re-deflating ~2 MB costs a third of a second).

    :param epoch: timestamp of every entry (clamped to 1980, the zip format's start).
    :param cache: the wheel cache (default :func:`~mirror.hostenv.node_wheel_cache`).
    """
    cache = cache or node_wheel_cache()
    epoch = max(epoch, ZIP_EPOCH)
    sources = _node_sources()
    wheels = ensure_wheels(cache)
    key = hashlib.sha256(f"pyz-v1 {epoch}\n".encode())
    for name, data in sorted(sources.items()):
        key.update(f"{name} {len(data)}\n".encode() + data)
    for wheel in wheels:
        key.update(f"{wheel.name} {wheel.stat().st_size}\n".encode())
    cached = cache / f"pyz-{key.hexdigest()[:32]}.pyz"
    if cached.exists():
        return cached.read_bytes()
    data = _build(sources, wheels, epoch)
    atomic_write(cached, data)
    for old in cache.glob("pyz-*.pyz"):  # keep only the newest build
        if old != cached:
            old.unlink(missing_ok=True)
    return data


def _build(entries: dict[str, bytes], wheels: list[Path], epoch: int) -> bytes:
    entries = dict(entries)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
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
