"""The index an operator vouches for: packages of a release archive that no signed index lists.

``mirror import-archive --trust-archive`` takes such packages on the operator's word. It writes
``<repo>/.vouched/<archive>.json`` - the archive's name and sha256, and per package its file name,
size, digests and own header (:class:`mirror.index.header.PackageHeader`) - and records it in the
repo's ``state.json`` as an index whose signer is :data:`VOUCHED`, so ``mirror status``, the bundle's
provenance and its SBOM say where the packages came from. The mirror's readers treat it like a signed
index: its bytes are checked against the recorded digest before it is parsed.
"""

from __future__ import annotations

import json
from typing import Any, Final

from installer.manifest import VOUCHED_UPSTREAM
from mirror.index.apt import parse_relations
from mirror.index.header import PackageHeader
from mirror.model import Package, PackageFormat, Relation, Relations

#: the "fingerprint" of a vouched index: no key signed it, the operator vouched for it (the node reads it too)
VOUCHED: Final = VOUCHED_UPSTREAM
DIRECTORY: Final = ".vouched"


def is_vouched(path: str) -> bool:
    """True when ``path`` (under the mirror) is a vouched index."""
    return f"/{DIRECTORY}/" in path and path.endswith(".json")


def entry_of(header: PackageHeader, filename: str, size: int, sha256: str, sha512: str) -> Package:
    """The index entry of a vouched package: what its own header says, with the digests of its bytes."""
    fields = dict((k.lower(), v) for k, v in header.fields)
    if header.format == "deb":
        depends = parse_relations(", ".join(v for k in ("pre-depends", "depends") if (v := fields.get(k))))
        relations: dict[str, Relations] = {
            k: parse_relations(fields.get(k, "")) for k in ("breaks", "conflicts", "replaces")
        }
        provides = tuple(r for group in parse_relations(fields.get("provides", "")) for r in group)
    else:
        depends = tuple((Relation(n, op, v),) for n, op, v in header.requires)
        relations = {"breaks": (), "conflicts": (), "replaces": ()}
        provides = tuple(Relation(p) for p in header.provides)
    return Package(
        format=PackageFormat(header.format),
        name=header.name,
        version=header.version,
        arch=header.arch,
        filename=filename,
        size=size,
        sha256=sha256,
        sha512=sha512,
        depends=depends,
        breaks=relations["breaks"],
        conflicts=relations["conflicts"],
        replaces=relations["replaces"],
        provides=provides,
    )


def render(
    archive: str, archive_sha256: str, packages: list[tuple[PackageHeader, str, int, str, str]]
) -> bytes:
    """The vouched index of ``archive``: per package its header, file name, size and digests."""
    body: dict[str, Any] = {
        "archive": archive,
        "archive_sha256": archive_sha256,
        "vouched_by": "the operator (gpu-airgap mirror import-archive --trust-archive)",
        "packages": [
            {"filename": f, "size": s, "sha256": d256, "sha512": d512, "header": h.to_json()}
            for h, f, s, d256, d512 in packages
        ],
    }
    return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()


def parse(data: bytes) -> list[Package]:
    """The entries of a vouched index (its bytes already matched the digest the state recorded).

    :raises KeyError | TypeError | ValueError: when it is not one.
    """
    raw = json.loads(data)
    return [
        entry_of(
            PackageHeader.from_json(p["header"]),
            str(p["filename"]),
            int(p["size"]),
            str(p["sha256"]),
            str(p["sha512"]),
        )
        for p in raw["packages"]
    ]
