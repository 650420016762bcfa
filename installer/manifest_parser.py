"""The strict reader of ``manifest.json``: it walks the raw JSON and lists every problem at once.

It runs on exactly the bytes a signature was checked over (:func:`parse_manifest`).
Every size is bounded (:data:`~installer.manifest.MAX_MEMBERS` and friends) before anything trusts it,
every digest and fingerprint has its exact form, every member name is plain and relative, and every
package relation is one the installer can evaluate. Node side: python3.9-compatible, stdlib only.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from installer.freshness import parse_time
from installer.manifest import (
    MANIFEST_NAME,
    MAX_MEMBER_SIZE,
    MAX_MEMBERS,
    MAX_TOTAL_SIZE,
    SCHEMA_VERSION,
    SIGNATURE_NAME,
    VOUCHED_UPSTREAM,
    FileEntry,
    Manifest,
    ManifestError,
    PackageEntry,
    Provenance,
    SignedFile,
    TargetEntry,
    is_plain_relative,
)
from installer.target import Requirement
from plumbing.errors import ToolError

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA512 = re.compile(r"^[0-9a-f]{128}$")
_FPR = re.compile(r"^[0-9A-F]{40}$")
_TARGET_NAME = re.compile(r"^(deb|rpm)-[a-z0-9_]+$")


def parse_manifest(data: bytes) -> Manifest:
    """Parse and validate manifest bytes (exactly the bytes a signature was checked over).

    :raises ManifestError: listing every problem found.
    """
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ManifestError([f"not UTF-8 JSON ({exc})"]) from exc
    except RecursionError as exc:  # json recurses once per level: a hostile manifest nests thousands
        raise ManifestError(["nested too deeply to be a manifest"]) from exc
    return _Parser().manifest(raw)


class _Parser:
    """Walks the raw JSON, collecting every problem instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: List[str] = []

    def _get(self, obj: Any, key: str, kind: type, where: str, *, optional: bool = False) -> Any:
        if not isinstance(obj, dict):
            return None
        if key not in obj or (optional and obj[key] is None):
            if not optional:
                self.problems.append(f"{where}.{key} is missing")
            return None
        value = obj[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            self.problems.append(f"{where}.{key} must be an integer")
            return None
        if not isinstance(value, kind):
            self.problems.append(f"{where}.{key} must be a {kind.__name__}")
            return None
        return value

    def _str(self, obj: Any, key: str, where: str, *, optional: bool = False) -> str:
        value = self._get(obj, key, str, where, optional=optional)
        return value if isinstance(value, str) else ""

    def _size(self, obj: Any, where: str) -> int:
        value = self._get(obj, "size", int, where)
        if isinstance(value, int) and not 0 <= value <= MAX_MEMBER_SIZE:
            self.problems.append(f"{where}.size {value} is outside 0..{MAX_MEMBER_SIZE}")
            return 0
        return value if isinstance(value, int) else 0

    def _digest(
        self, obj: Any, key: str, where: str, pattern: re.Pattern[str], *, optional: bool = False
    ) -> str:
        value = self._str(obj, key, where, optional=optional)
        if value and not pattern.match(value):
            self.problems.append(f"{where}.{key} is not a lower-case hex digest")
        return value

    def _member_path(self, obj: Any, key: str, where: str) -> str:
        value = self._str(obj, key, where)
        if value and not is_plain_relative(value):
            self.problems.append(f"{where}.{key} {value!r} is not a plain relative path")
        return value

    def _list(self, obj: Any, key: str, where: str) -> List[Any]:
        value = self._get(obj, key, list, where)
        if isinstance(value, list) and len(value) > MAX_MEMBERS:
            self.problems.append(f"{where}.{key} has {len(value)} entries, more than {MAX_MEMBERS}")
            return []
        return value if isinstance(value, list) else []

    def _strings(self, obj: Any, key: str, where: str) -> Tuple[str, ...]:
        items = self._list(obj, key, where)
        if any(not isinstance(i, str) for i in items):
            self.problems.append(f"{where}.{key} must be a list of strings")
            return ()
        return tuple(items)

    def manifest(self, raw: Any) -> Manifest:
        if not isinstance(raw, dict):
            raise ManifestError(["the top level is not a JSON object"])
        schema = self._get(raw, "schema", int, "manifest")
        if isinstance(schema, int) and schema != SCHEMA_VERSION:
            self.problems.append(
                f"schema {schema} is not supported (this tool reads schema {SCHEMA_VERSION})"
            )
        upstream = self._get(raw, "upstream", dict, "manifest")
        upstream_fpr = self._str(upstream, "fingerprint", "manifest.upstream")
        signer = self._str(raw, "signer", "manifest")
        signers = self._strings(raw, "signers", "manifest") if raw.get("signers") is not None else ()
        for label, fpr in (
            ("upstream.fingerprint", upstream_fpr),
            ("signer", signer),
            *(("signers", s) for s in signers),
        ):
            if (
                fpr
                and not _FPR.match(fpr)
                and not (label == "upstream.fingerprint" and fpr == VOUCHED_UPSTREAM)
            ):
                self.problems.append(f"manifest.{label} is not a 40-hex-digit fingerprint")
        created = self._str(raw, "created", "manifest")
        expires = self._str(raw, "expires", "manifest", optional=True) or None
        for label, moment in (("created", created), ("expires", expires)):
            if moment is not None and parse_time(moment) is None:
                self.problems.append(f"manifest.{label} {moment!r} is not a time like 2026-01-31T12:00:00Z")
        targets = tuple(
            self._target(t, f"targets[{i}]") for i, t in enumerate(self._list(raw, "targets", "manifest"))
        )
        files = tuple(
            self._file(f, f"files[{i}]") for i, f in enumerate(self._list(raw, "files", "manifest"))
        )
        known = {
            "schema",
            "tool_version",
            "created",
            "channel",
            "toolkit_version",
            "upstream",
            "signer",
            "signers",
            "expires",
            "targets",
            "files",
        }
        manifest = Manifest(
            schema=schema if isinstance(schema, int) else 0,
            tool_version=self._str(raw, "tool_version", "manifest"),
            created=created,
            channel=self._str(raw, "channel", "manifest"),
            toolkit_version=self._str(raw, "toolkit_version", "manifest"),
            upstream_url=self._str(upstream, "url", "manifest.upstream"),
            upstream_fingerprint=upstream_fpr,
            signer=signer,
            targets=targets,
            files=files,
            expires=expires,
            signers=signers,
            extra={k: v for k, v in raw.items() if k not in known},
        )
        self._check_members(manifest)
        if self.problems:
            raise ManifestError(self.problems)
        return manifest

    def _check_members(self, manifest: Manifest) -> None:
        seen: Dict[str, int] = {}
        total = 0
        for path, size in [(f.path, f.size) for f in manifest.files] + [
            (p.file, p.size) for t in manifest.targets for p in t.packages
        ]:
            seen[path] = seen.get(path, 0) + 1
            total += size
        for path, count in sorted(seen.items()):
            if count > 1:
                self.problems.append(f"member {path} is listed {count} times")
            if path in (MANIFEST_NAME, SIGNATURE_NAME):
                self.problems.append(f"member {path} must not list itself")
        if len(seen) > MAX_MEMBERS:
            self.problems.append(f"the manifest lists {len(seen)} members, more than {MAX_MEMBERS}")
        if total > MAX_TOTAL_SIZE:
            self.problems.append(f"the members add up to {total} bytes, more than {MAX_TOTAL_SIZE}")
        names = [f"{t.format}/{t.arch}" for t in manifest.targets]  # as typed (--target deb/amd64)
        for name in sorted({n for n in names if names.count(n) > 1}):
            self.problems.append(f"target {name} is listed more than once")

    def _file(self, raw: Any, where: str) -> FileEntry:
        if not isinstance(raw, dict):
            self.problems.append(f"{where} is not an object")
            return FileEntry("", 0, "")
        return FileEntry(
            path=self._member_path(raw, "path", where),
            size=self._size(raw, where),
            sha256=self._digest(raw, "sha256", where, _SHA256),
            role=self._str(raw, "role", where, optional=True),
        )

    def _target(self, raw: Any, where: str) -> TargetEntry:
        if not isinstance(raw, dict):
            self.problems.append(f"{where} is not an object")
            raw = {}
        fmt, arch = self._str(raw, "format", where), self._str(raw, "arch", where)
        if fmt and arch and not _TARGET_NAME.match(f"{fmt}-{arch}"):
            self.problems.append(f"{where} has an unknown format/arch {fmt}/{arch}")
        prov_raw = self._get(raw, "provenance", dict, where)
        pwhere = f"{where}.provenance"
        signed = tuple(
            SignedFile(
                path=self._str(s, "path", f"{pwhere}.signed_files[{i}]"),
                size=self._size(s, f"{pwhere}.signed_files[{i}]"),
                sha256=self._digest(s, "sha256", f"{pwhere}.signed_files[{i}]", _SHA256, optional=True)
                or None,
                sha512=self._digest(s, "sha512", f"{pwhere}.signed_files[{i}]", _SHA512, optional=True)
                or None,
            )
            for i, s in enumerate(self._list(prov_raw, "signed_files", pwhere))
        )
        provenance = Provenance(
            upstream_url=self._str(prov_raw, "upstream_url", pwhere),
            fingerprint=self._str(prov_raw, "fingerprint", pwhere),
            signed_at=self._str(prov_raw, "signed_at", pwhere, optional=True) or None,
            signed_files=signed,
        )
        packages = tuple(
            self._package(p, f"{where}.packages[{i}]")
            for i, p in enumerate(self._list(raw, "packages", where))
        )
        orders = sorted(p.install_order for p in packages)
        if orders != list(range(len(packages))):
            self.problems.append(f"{where} install_order must number the packages 0..{len(packages) - 1}")
        return TargetEntry(
            format=fmt,
            arch=arch,
            repo_dir=self._member_path(raw, "repo_dir", where),
            toolkit_version=self._str(raw, "toolkit_version", where),
            provenance=provenance,
            packages=tuple(sorted(packages, key=lambda p: p.install_order)),
            node_requirements=self._strings(raw, "node_requirements", where),
        )

    def _package(self, raw: Any, where: str) -> PackageEntry:
        if not isinstance(raw, dict):
            self.problems.append(f"{where} is not an object")
            raw = {}
        order = self._get(raw, "install_order", int, where)
        return PackageEntry(
            name=self._str(raw, "name", where),
            version=self._str(raw, "version", where),
            arch=self._str(raw, "arch", where),
            file=self._member_path(raw, "file", where),
            size=self._size(raw, where),
            sha256=self._digest(raw, "sha256", where, _SHA256),
            install_order=order if isinstance(order, int) else -1,
            depends=self._strings(raw, "depends", where),
            origin=self._str(raw, "origin", where, optional=True),
            breaks=self._relations(raw, "breaks", where),
            header=self._pairs(raw, "header", where),
            file_digest_algo=self._str(raw, "file_digest_algo", where, optional=True) or None,
        )

    def _pairs(self, raw: Any, key: str, where: str) -> Optional[Tuple[Tuple[str, str], ...]]:
        """An optional list of ``[name, value]`` string pairs."""
        if not isinstance(raw, dict) or raw.get(key) is None:
            return None
        items = self._list(raw, key, where)
        if any(
            not (isinstance(i, list) and len(i) == 2 and all(isinstance(x, str) for x in i)) for i in items
        ):
            self.problems.append(f"{where}.{key} must be a list of [name, value] string pairs")
            return None
        return tuple((i[0], i[1]) for i in items)

    def _relations(self, raw: Any, key: str, where: str) -> Optional[Tuple[str, ...]]:
        """An optional list of package relations, each one the installer can evaluate."""
        if not isinstance(raw, dict) or raw.get(key) is None:
            return None
        items = self._strings(raw, key, where)
        for item in items:
            try:
                Requirement.parse(item)
            except ToolError:
                self.problems.append(f"{where}.{key} has {item!r}, which is not a package relation")
        return items
