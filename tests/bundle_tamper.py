"""Bundles an attacker (or an old gpu-airgap) made from a real one, for the node-trust tests.

:func:`repack` rewrites a real bundle's tar stream member by member, replacing or dropping some and
keeping every other byte and the order, so the original ``manifest.json.asc`` stays valid for
what it covered. The replacements that matter are code that leaves a trace when it runs:
:func:`marker_script` (an ``install.sh``) and :func:`marker_zipapp` (a ``gpu-airgap-node.pyz``)
each write a marker file, so a test can assert that nothing from a tampered bundle ever ran.
"""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

import zstandard

from installer import archive
from installer.manifest import MANIFEST_NAME, SIGNATURE_NAME
from installer.nodecheck import INSTALL_SH, NODE_SUMS, NODE_SUMS_SIGNATURE, NODE_TOOL, render_sums
from tests.gpgkeys import TestKey


def members(bundle: Path) -> List[Tuple[tarfile.TarInfo, bytes]]:
    """Every member of ``bundle`` (any compression) with its content, in archive order."""
    with archive.open_stream(bundle) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        out = []
        for info in tar:
            handle = tar.extractfile(info)
            out.append((info, handle.read() if handle is not None else b""))
        return out


def write(entries: Iterable[Tuple[tarfile.TarInfo, bytes]], out: Path) -> Path:
    """A zstd-compressed tar of ``entries`` (as a default bundle is) at ``out``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out.write_bytes(zstandard.ZstdCompressor().compress(raw.getvalue()))
    return out


def repack(bundle: Path, out: Path, replace: Mapping[str, bytes] = {}, drop: Iterable[str] = ()) -> Path:
    """``bundle`` with the members in ``replace`` given new content and those in ``drop`` left out."""
    dropped = set(drop)
    return write(
        ((info, replace.get(info.name, data)) for info, data in members(bundle) if info.name not in dropped),
        out,
    )


def marker_script(marker: Path) -> bytes:
    """An ``install.sh`` that only leaves ``marker`` behind."""
    return f"#!/bin/sh\necho 'install.sh from a tampered bundle ran' > '{marker}'\n".encode()


def marker_zipapp(marker: Path) -> bytes:
    """A ``gpu-airgap-node.pyz`` (a runnable zipapp) that only leaves ``marker`` behind."""
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("__main__.py", f"open({str(marker)!r}, 'w').write('the tampered node tool ran')\n")
    return buffer.getvalue()


def node_files(bundle: Path) -> Dict[str, bytes]:
    """The real install.sh and node tool of ``bundle``."""
    return {info.name: data for info, data in members(bundle) if info.name in (INSTALL_SH, NODE_TOOL)}


def resigned_node_check(bundle: Path, signer: TestKey, replace: Mapping[str, bytes]) -> Dict[str, bytes]:
    """Replacements for ``bundle`` whose NODE-SHA256SUMS lists the replaced files, signed by ``signer``.

    What an attacker with their own key makes of a bundle (the manifest is left as it was).
    """
    files = {**node_files(bundle), **replace}
    sums = render_sums(files)
    return {**replace, NODE_SUMS: sums, NODE_SUMS_SIGNATURE: signer.sign_detached(sums)}


def resigned_manifest(
    bundle: Path, out: Path, signer: TestKey, replace: Mapping[str, bytes] = {}, drop: Iterable[str] = ()
) -> Path:
    """``bundle`` with members replaced or dropped and a manifest that says so, signed by ``signer``.

    With the real operator key this is a bundle the operator signed (an older build's layout, or a
    build whose node check disagrees with its manifest), not an attack.
    """
    import hashlib

    dropped = set(drop)
    entries = [
        (info, replace.get(info.name, data)) for info, data in members(bundle) if info.name not in dropped
    ]
    manifest = json.loads(dict((i.name, d) for i, d in entries)[MANIFEST_NAME])
    manifest["files"] = [
        {**f, "size": len(replace[f["path"]]), "sha256": hashlib.sha256(replace[f["path"]]).hexdigest()}
        if f["path"] in replace
        else f
        for f in manifest["files"]
        if f["path"] not in dropped
    ]
    manifest_bytes = (
        json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    ).encode()
    fresh = {MANIFEST_NAME: manifest_bytes, SIGNATURE_NAME: signer.sign_detached(manifest_bytes)}
    return write(((info, fresh.get(info.name, data)) for info, data in entries), out)
