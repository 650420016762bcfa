"""Flat apt repositories the way NVIDIA publishes them: ``.deb`` files, Packages(.xz), InRelease.

``.deb`` files come from the real ``dpkg-deb --build``. Packages is written here rather than by
``dpkg-scanpackages`` because NVIDIA's index is apt-ftparchive output, whose field order
(Filename/Size/hashes between the control fields and Homepage) dpkg-scanpackages does not produce.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import random
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from plumbing.proc import run
from tests.upstream.catalog import PackageSpec, index_sort_key
from tests.upstream.keys import SigningKey

#: NVIDIA's InRelease date has been frozen at this value since 2018.
FROZEN_DATE: Final = "Fri, 27 Apr 2018 21:29:25 +0000"
#: A fixed mtime for every file inside the packages, so builds are reproducible.
SOURCE_DATE_EPOCH: Final = 1524864565
_PAD_NAME: Final = "gpu-airgap-padding.bin"


def padding_file(spec: PackageSpec, payload_mb: float) -> bytes:
    """Incompressible, deterministic padding bytes for ``spec`` (empty when ``payload_mb`` is 0)."""
    size = int(payload_mb * 1024 * 1024)
    if size <= 0:
        return b""
    seed = hashlib.sha256(f"{spec.name}|{spec.version}|{spec.arch}".encode()).digest()
    return random.Random(seed).randbytes(size)


def _stage(spec: PackageSpec, root: Path, payload_mb: float) -> int:
    """Write the payload under ``root``; return the installed size in KiB, dpkg style."""
    kib = 0
    files = list(spec.files)
    pad = padding_file(spec, payload_mb)
    for item in files:
        target = root / item.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.content)
        os.chmod(target, item.mode)
        kib += (len(item.content) + 1023) // 1024
    if pad:
        target = root / "usr/share" / spec.name / _PAD_NAME
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(pad)
        kib += (len(pad) + 1023) // 1024
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in (*dirnames, *filenames):
            os.utime(Path(dirpath, entry), (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH), follow_symlinks=False)
    return max(kib, 1)


def control_text(spec: PackageSpec, installed_size: int) -> str:
    """The DEBIAN/control of ``spec``: the real field order, our Installed-Size."""
    lines = []
    for key, value in spec.fields:
        if key == "Installed-Size":
            value = str(installed_size)
        lines.append(f"{key}: {value}")
    return "\n".join(lines) + "\n"


def build_deb(
    spec: PackageSpec, out_dir: Path, work_dir: Path, *, payload_mb: float = 0.0
) -> tuple[Path, int]:
    """Build ``spec`` with ``dpkg-deb --build`` into ``out_dir``; return the .deb path and Installed-Size."""
    root = work_dir / f"deb-{spec.name}-{spec.version}-{spec.arch}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "DEBIAN").mkdir(parents=True)
    installed = _stage(spec, root, payload_mb)
    (root / "DEBIAN" / "control").write_text(control_text(spec, installed), encoding="utf-8")
    conffiles = [f.path for f in spec.files if f.conffile]
    if conffiles:
        (root / "DEBIAN" / "conffiles").write_text("".join(p + "\n" for p in conffiles), encoding="utf-8")
    os.chmod(root / "DEBIAN", 0o755)
    out = out_dir / spec.deb_filename
    # Padding is random bytes: compressing it costs time and gains nothing, so pad-heavy packages
    # use gzip -1; the default small packages use xz like NVIDIA's.
    compress = ["-Zgzip", "-z1"] if payload_mb > 0 else ["-Zxz"]
    run(
        ["dpkg-deb", "--root-owner-group", *compress, "--build", str(root), str(out)],
        env_overrides={"SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)},
        timeout=600,
    )
    shutil.rmtree(root, ignore_errors=True)
    return out, installed


def _digests(path: Path) -> dict[str, str]:
    hashes = {
        "MD5sum": hashlib.md5(),
        "SHA1": hashlib.sha1(),
        "SHA256": hashlib.sha256(),
        "SHA512": hashlib.sha512(),
    }
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            for h in hashes.values():
                h.update(chunk)
    return {name: h.hexdigest() for name, h in hashes.items()}


def packages_stanza(spec: PackageSpec, deb: Path, installed_size: int) -> str:
    """One apt-ftparchive style stanza: control fields with Filename..SHA512 before Homepage."""
    index = [("Filename", f"./{deb.name}"), ("Size", str(deb.stat().st_size)), *_digests(deb).items()]
    lines: list[str] = []
    for key, value in spec.fields:
        if key == "Homepage":
            lines.extend(f"{k}: {v}" for k, v in index)
        if key == "Installed-Size":
            value = str(installed_size)
        lines.append(f"{key}: {value}")
    return "\n".join(lines) + "\n"


def render_packages(entries: Sequence[tuple[PackageSpec, Path, int]]) -> bytes:
    """The whole Packages file, sorted like apt-ftparchive, ending with the extra blank line."""
    ordered = sorted(entries, key=lambda e: index_sort_key(e[0]))
    return "".join(packages_stanza(s, d, i) + "\n" for s, d, i in ordered).encode("ascii")


def release_body(*, arch: str, channel: str, files: dict[str, bytes]) -> bytes:
    """The signed body of InRelease, with exactly NVIDIA's fields and the ``' %s %16s %s'`` hash lines."""
    lines = [
        f"Architectures: {arch}",
        f"Codename: {channel}",
        "Components: main",
        f"Date: {FROZEN_DATE}",
        "Description: NVIDIA container runtime library repository",
        "Label: NVIDIA CORPORATION <cudatools@nvidia.com>",
        f"Origin: https://nvidia.github.io/libnvidia-container/{channel}",
        "Version: 1.0",
        "SHA512:",
    ]
    lines += [f" {hashlib.sha512(data).hexdigest()} {len(data):>16} {name}" for name, data in files.items()]
    return ("\n".join(lines) + "\n").encode("ascii")


def write_index(repo_dir: Path, *, arch: str, channel: str, packages: bytes, key: SigningKey) -> None:
    """Write Packages, Packages.xz and the clearsigned InRelease into ``repo_dir``."""
    xz = lzma.compress(packages, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64)
    (repo_dir / "Packages").write_bytes(packages)
    (repo_dir / "Packages.xz").write_bytes(xz)
    body = release_body(arch=arch, channel=channel, files={"Packages": packages, "Packages.xz": xz})
    (repo_dir / "InRelease").write_bytes(key.clearsign(body))
