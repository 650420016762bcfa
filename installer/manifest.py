"""The bundle manifest: what a signed bundle holds, where it came from, and the digest of every member.

``manifest.json`` is the one file the operator signs (``manifest.json.asc``). It lists the size and
sha256 of every other member, so one detached signature covers the whole bundle. It also records
the trust chain NVIDIA → mirror → bundle: the upstream key fingerprint that verified each synced
repository and the hashes of the signed upstream metadata (``InRelease``, ``repomd.xml``) that
vouched for the packages.

:meth:`Manifest.to_json` is canonical (sorted keys, fixed separators, UTF-8, trailing newline), so
the same content always renders to the same bytes. Reading goes the other way, in
:func:`installer.manifest_parser.parse_manifest`, which is strict and lists every problem it finds at
once; it imports this module, never the reverse. Node side: python3.9-compatible, stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from plumbing.errors import VerificationError

SCHEMA_VERSION = 1
#: the upstream "fingerprint" of packages no signed index listed, taken on the operator's word
#: (``mirror import-archive --trust-archive``): the operator's signature over the bundle is their only trust
VOUCHED_UPSTREAM = "operator-vouched"
MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "manifest.json.asc"
#: Upper bounds a reader enforces before trusting any size (decompression bombs, runaway lists).
MAX_MEMBERS = 20_000
MAX_MEMBER_SIZE = 8 << 30
MAX_TOTAL_SIZE = 64 << 30
MAX_MANIFEST_SIZE = 32 << 20
MAX_SIGNATURE_SIZE = 64 << 10


class ManifestError(VerificationError):
    """``manifest.json`` is not a valid gpu-airgap manifest; ``problems`` lists every issue."""

    def __init__(self, problems: List[str]) -> None:
        self.problems = list(problems)
        shown = "; ".join(self.problems[:5]) + ("; …" if len(self.problems) > 5 else "")
        super().__init__(f"the bundle manifest is invalid ({len(self.problems)} problem(s)): {shown}")


@dataclass(frozen=True)
class FileEntry:
    """A member of the bundle other than a package: its path, size and sha256."""

    path: str
    size: int
    sha256: str
    role: str = ""  #: what the file is for: ``repo-metadata``, ``node-tool``, ``sbom``, ``operator-key`` …


@dataclass(frozen=True)
class SignedFile:
    """A signed upstream metadata file (``InRelease``, ``repomd.xml``) as the mirror verified it."""

    path: str
    size: int
    sha256: Optional[str] = None
    sha512: Optional[str] = None


@dataclass(frozen=True)
class Provenance:
    """Who signed a target's upstream metadata, when, and the hashes of those signed files."""

    upstream_url: str
    fingerprint: str
    signed_at: Optional[str]
    signed_files: Tuple[SignedFile, ...] = ()


@dataclass(frozen=True)
class PackageEntry:
    """One package a target installs, in the order it must be installed."""

    name: str
    version: str
    arch: str
    file: str  #: member path inside the bundle
    size: int
    sha256: str
    install_order: int
    depends: Tuple[str, ...] = ()
    origin: str = ""  #: the upstream URL it was downloaded from
    #: Breaks/Conflicts against packages outside the target (``nvidia-container-runtime (<= 3.5.0-1)``):
    #: installed matches must be removed first. None when the bundle predates this field.
    breaks: Optional[Tuple[str, ...]] = None
    #: What the package's own header says (deb control fields, rpm name/version/release/arch/requires),
    #: read by the builder and checked against the signed index entry. None when the bundle predates this field.
    header: Optional[Tuple[Tuple[str, str], ...]] = None
    #: rpm only: the algorithm of the file digests in the package's header (``md5``, ``sha256``:
    #: :mod:`installer.fips`). None for a deb, or when the bundle predates this field.
    file_digest_algo: Optional[str] = None


@dataclass(frozen=True)
class TargetEntry:
    """One (format, arch) the bundle can install: a ready local repo plus its packages."""

    format: str  #: ``deb`` or ``rpm``
    arch: str  #: the package arch spelling (``amd64``, ``x86_64``, …)
    repo_dir: str  #: member directory holding the repo (``targets/deb-amd64``)
    toolkit_version: str  #: full package version of nvidia-container-toolkit (``1.17.8-1``)
    provenance: Provenance
    packages: Tuple[PackageEntry, ...]
    node_requirements: Tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``deb-amd64`` style identifier."""
        return f"{self.format}-{self.arch}"


@dataclass(frozen=True)
class Manifest:
    """The whole manifest; see the module docstring."""

    tool_version: str
    created: str  #: ISO 8601 UTC, from SOURCE_DATE_EPOCH when set
    channel: str
    toolkit_version: str  #: upstream version (``1.17.8``)
    upstream_url: str
    upstream_fingerprint: str
    signer: (
        str  #: fingerprint of the operator key that signed the manifest (as claimed; ``verify`` proves it)
    )
    targets: Tuple[TargetEntry, ...]
    files: Tuple[FileEntry, ...]
    #: when the bundle stops being installable (``bundle build --expires``), same form as ``created``; None: never
    expires: Optional[str] = None
    #: every operator key that signed (``--sign-key`` twice during a key rotation); empty: ``signer`` alone
    signers: Tuple[str, ...] = ()
    schema: int = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict, compare=False)

    def members(self) -> Dict[str, Tuple[int, str]]:
        """Every member the archive must hold besides the manifest and its signature: path -> (size, sha256)."""
        out: Dict[str, Tuple[int, str]] = {}
        for entry in self.files:
            out[entry.path] = (entry.size, entry.sha256)
        for target in self.targets:
            for pkg in target.packages:
                out[pkg.file] = (pkg.size, pkg.sha256)
        return out

    def to_dict(self) -> Dict[str, Any]:
        """The JSON-ready form."""
        return {
            "schema": self.schema,
            "tool_version": self.tool_version,
            "created": self.created,
            "channel": self.channel,
            "toolkit_version": self.toolkit_version,
            "upstream": {"url": self.upstream_url, "fingerprint": self.upstream_fingerprint},
            "signer": self.signer,
            **({} if self.expires is None else {"expires": self.expires}),
            **({"signers": list(self.signers)} if self.signers else {}),
            "targets": [_target_dict(t) for t in self.targets],
            "files": [
                {"path": f.path, "size": f.size, "sha256": f.sha256, "role": f.role}
                for f in sorted(self.files, key=lambda f: f.path)
            ],
        }

    def to_json(self) -> bytes:
        """Canonical bytes: sorted keys, fixed separators, UTF-8, one trailing newline."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return (text + "\n").encode("utf-8")


def _target_dict(t: TargetEntry) -> Dict[str, Any]:
    prov = t.provenance
    return {
        "format": t.format,
        "arch": t.arch,
        "repo_dir": t.repo_dir,
        "toolkit_version": t.toolkit_version,
        "node_requirements": list(t.node_requirements),
        "provenance": {
            "upstream_url": prov.upstream_url,
            "fingerprint": prov.fingerprint,
            "signed_at": prov.signed_at,
            "signed_files": [
                {"path": s.path, "size": s.size, "sha256": s.sha256, "sha512": s.sha512}
                for s in prov.signed_files
            ],
        },
        "packages": [
            {
                "name": p.name,
                "version": p.version,
                "arch": p.arch,
                "file": p.file,
                "size": p.size,
                "sha256": p.sha256,
                "install_order": p.install_order,
                "depends": list(p.depends),
                "origin": p.origin,
                **({} if p.breaks is None else {"breaks": list(p.breaks)}),
                **({} if p.header is None else {"header": [list(pair) for pair in p.header]}),
                **({} if p.file_digest_algo is None else {"file_digest_algo": p.file_digest_algo}),
            }
            for p in sorted(t.packages, key=lambda p: p.install_order)
        ],
    }


def is_plain_relative(path: str) -> bool:
    """A member name we would create: relative, no ``..``/``.``/empty parts, no backslash or NUL."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))
