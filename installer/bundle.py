"""Read a signed bundle safely: inspect it, verify it, or extract it into a private staging directory.

A bundle is a tar stream (see :mod:`installer.archive` for compression and split parts) whose
first two members are ``manifest.json`` and its detached signature ``manifest.json.asc``. The
reader makes one streaming pass:

1. read the manifest and signature (both size-capped), check the signature with the caller's
   keyring, and only then parse exactly the verified bytes;
2. for every following member, refuse it unless it is a regular file with a plain relative name,
   listed in the manifest, not seen before, with the size the manifest gives — *before* reading
   its data; a member that is not listed or has another size ends the scan there, so its data is
   never read — then hash its data as it streams by (and, when extracting, write it below staging);
3. at the end, report manifest entries the archive did not contain, and check the node check
   (:mod:`installer.nodecheck`: ``NODE-SHA256SUMS`` and its signature agree with the manifest and
   the keyring), so a bundle that verifies here also passes the check a node makes with its own tools.

Nothing is ever written outside the private staging directory, and a failed extraction removes
what it wrote. Trust comes only from the keyring the caller passes, never from the bundle.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from lzma import LZMAError
from pathlib import Path
from typing import BinaryIO, Dict, List, Optional, Set, Union

from installer import freshness
from installer.archive import CHUNK, SignatureCheck, open_stream
from installer.bundle_report import BundleVerificationError as BundleVerificationError
from installer.bundle_report import BundleVerifyReport, Problem
from installer.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_SIZE,
    MAX_MEMBER_SIZE,
    MAX_MEMBERS,
    MAX_SIGNATURE_SIZE,
    SIGNATURE_NAME,
    Manifest,
    is_plain_relative,
)
from installer.manifest_parser import parse_manifest
from installer.nodecheck import MAX_SUMS_SIZE, NODE_SUMS, NODE_SUMS_SIGNATURE, has_node_check
from installer.nodecheck import check as check_node
from plumbing.errors import ToolError, UsageError, VerificationError
from plumbing.fsutil import safe_join
from plumbing.keyfile import openpgp_kind
from plumbing.progress import Meter, NoMeter

#: End-of-archive padding we accept after the last member; more than this is refused.
_MAX_TRAILER = 1 << 20
PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class VerifiedBundle:
    """A bundle whose signature and every member checked out, extracted below ``root``."""

    root: Path  #: the private staging directory holding exactly the manifest's members
    manifest: Manifest
    signer: str

    def path_of(self, member: str) -> Path:
        """The extracted file of ``member``."""
        return safe_join(self.root, member)


class _Stop(Exception):
    """Internal: stop the scan (fatal problem already recorded)."""


class _Scan:
    """One streaming pass over a bundle; see the module docstring for the order of checks."""

    def __init__(
        self,
        path: Path,
        keyring: Optional[SignatureCheck],
        *,
        sink: Optional[Path],
        stop_early: bool,
        meter: Optional[Meter] = None,
        policy: Optional[freshness.Policy] = None,
    ) -> None:
        self.path = path
        self.meter = meter or NoMeter()
        self.keyring = keyring
        self.sink = sink
        self.stop_early = stop_early
        self.policy = policy or freshness.Policy()
        self.report = BundleVerifyReport(str(path), now=self.policy.clock())
        self._manifest_bytes: Optional[bytes] = None
        self._signature: Optional[bytes] = None
        self._expected: Dict[str, tuple[int, str]] = {}
        self._seen: Set[str] = set()
        self._node: Dict[str, bytes] = {}  #: the node check's list and signature, as read

    def fail(self, member: str, message: str, *, fatal: bool = False) -> None:
        self.report.problems.append(Problem(member, message))
        if fatal or self.stop_early:
            raise _Stop

    def run(self, *, manifest_only: bool = False) -> BundleVerifyReport:
        try:
            return self._run(manifest_only)
        finally:
            self.meter.close()

    def _run(self, manifest_only: bool) -> BundleVerifyReport:
        last = "(start of archive)"
        try:
            with (
                open_stream(self.path, self.keyring) as stream,
                tarfile.open(fileobj=stream, mode="r|") as tar,
            ):
                for count, info in enumerate(tar, start=1):
                    last = info.name
                    if count > MAX_MEMBERS + 2:
                        self.fail(info.name, f"the archive has more than {MAX_MEMBERS} members", fatal=True)
                    self._member(tar, info)
                    if manifest_only and self.report.manifest is not None:
                        return self.report
                    tar.members = []  # type: ignore[attr-defined]  # stream mode keeps every header otherwise; memory must stay flat
                self._finish(stream)
        except _Stop:
            pass
        except (tarfile.TarError, EOFError, LZMAError, zlib.error, OSError) as exc:
            self._damaged(last, exc)
        except VerificationError as exc:  # a split part or its checksum list failed
            self.report.problems.append(Problem(self.path.name, str(exc)))
        except ToolError as exc:
            if not _is_zstd_failure(exc):
                raise
            self._damaged(last, exc)
        return self.report

    def _damaged(self, last: str, exc: BaseException) -> None:
        """A damaged stream is the cause: it leads, and the members it cut off are not listed as missing.

        The ``zstd`` command streams a frame's data before it checks the frame's checksum, so a
        flipped byte first shows as a member whose sha256 differs; that stays listed, after the cause.
        """
        kept = [p for p in self.report.problems if not p.message.endswith("but missing from the archive")]
        cause = Problem(last, f"the archive is damaged or truncated after this member ({exc})")
        self.report.problems[:] = [cause, *kept]

    def _member(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        name = info.name
        if not is_plain_relative(name):
            self.fail(
                name,
                "refusing an absolute, '..' or otherwise unsafe member name",
                fatal=self.sink is not None,
            )
            return
        if not info.isreg() or info.issparse():
            self.fail(
                name,
                f"refusing a {_kind_of(info)}: a bundle holds only regular files",
                fatal=self.sink is not None,
            )
            return
        if name in self._seen:
            self.fail(name, "appears twice in the archive", fatal=self.sink is not None)
            return
        self._seen.add(name)
        if name in (MANIFEST_NAME, SIGNATURE_NAME):
            self._head_member(tar, info)
            return
        if self.report.manifest is None:
            self.fail(
                name,
                f"comes before {MANIFEST_NAME} and {SIGNATURE_NAME}; refusing an unsigned archive",
                fatal=True,
            )
        # An unlisted member, or one of another size, stops the scan at its header: stepping over
        # its data would mean reading (decompressing) all of it, and its size is the attacker's to choose.
        if name not in self._expected:
            self.fail(name, "is not listed in the signed manifest; stopped before reading it", fatal=True)
        size, sha256 = self._expected[name]
        if info.size != size or info.size > MAX_MEMBER_SIZE:
            self.fail(
                name,
                f"has {info.size} bytes, the manifest says {size}; stopped before reading it",
                fatal=True,
            )
        self._check_data(tar, info, sha256)

    def _head_member(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        limit = MAX_MANIFEST_SIZE if info.name == MANIFEST_NAME else MAX_SIGNATURE_SIZE
        if info.size > limit:
            self.fail(info.name, f"is {info.size} bytes, larger than the {limit}-byte limit", fatal=True)
        handle = tar.extractfile(info)
        data = handle.read() if handle is not None else b""
        if info.name == MANIFEST_NAME:
            self._manifest_bytes = data
        else:
            self._signature = data
        if self._manifest_bytes is None or self._signature is None:
            return
        self._trust_manifest(self._manifest_bytes, self._signature)

    def _trust_manifest(self, data: bytes, signature: bytes) -> None:
        if self.keyring is not None:
            try:
                self.report.signer = self.keyring.verify_detached(
                    data, signature, what=MANIFEST_NAME
                ).fingerprint
            except VerificationError as exc:
                # A BADSIG is a well-formed signature by the trusted key over other bytes: the
                # manifest changed. A damaged armor (its CRC covers every byte) or a signature by
                # another key means the signature file is what was altered or replaced.
                member = MANIFEST_NAME if "bad signature" in str(exc) else SIGNATURE_NAME
                self.fail(member, str(exc), fatal=True)
                return  # nothing unverified is parsed
        try:
            manifest = parse_manifest(data)
        except VerificationError as exc:
            self.fail(MANIFEST_NAME, str(exc), fatal=True)
            return
        self.report.manifest = manifest
        if (
            self.report.signer is not None
        ):  # checked: counted as every other member (bundle build counts them all)
            self.report.members_checked += 2
            self.report.bytes_checked += len(data) + len(signature)
        expired = freshness.expiry_problem(manifest.created, manifest.expires, self.report.now)
        if expired and self.report.signer is not None and not self.policy.allow_expired:
            self.fail(MANIFEST_NAME, expired, fatal=self.sink is not None)
        self._expected = manifest.members()
        self.meter.start(sum(size for size, _ in self._expected.values()))
        if self.sink is not None:  # only reached with a good signature: extraction stops otherwise
            for name, content in ((MANIFEST_NAME, data), (SIGNATURE_NAME, signature)):
                with open(safe_join(self.sink, name), "xb") as out:
                    out.write(content)

    def _check_data(self, tar: tarfile.TarFile, info: tarfile.TarInfo, sha256: str) -> None:
        handle = tar.extractfile(info)
        assert handle is not None  # regular file
        hasher = hashlib.sha256()
        kept: Optional[List[bytes]] = (
            [] if info.name in (NODE_SUMS, NODE_SUMS_SIGNATURE) and info.size <= MAX_SUMS_SIZE else None
        )
        out: Optional[BinaryIO] = None
        if self.sink is not None:
            target = safe_join(self.sink, info.name)
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            out = open(target, "xb")  # noqa: SIM115 (closed below)  # fresh private directory: nothing may already be there
        try:
            while True:
                block = handle.read(CHUNK)
                if not block:
                    break
                hasher.update(block)
                self.meter.advance(len(block))
                if kept is not None:
                    kept.append(block)
                if out is not None:
                    out.write(block)
        finally:
            if out is not None:
                out.close()
                os.chmod(target, 0o755 if info.mode & 0o111 else 0o644)
        self.report.members_checked += 1
        self.report.bytes_checked += info.size
        if hasher.hexdigest() != sha256:
            self.fail(
                info.name, "does not match its sha256 in the signed manifest", fatal=self.sink is not None
            )
        elif kept is not None:
            self._node[info.name] = b"".join(kept)

    def _finish(self, stream: BinaryIO) -> None:
        if self.report.manifest is None:
            self.fail(MANIFEST_NAME, "is missing from the archive", fatal=True)
        if self._signature is None:
            self.fail(SIGNATURE_NAME, "is missing from the archive", fatal=True)
        for name in sorted(set(self._expected) - self._seen):
            self.fail(name, "is listed in the manifest but missing from the archive")
        self._check_node()
        # Read to the end so split parts get their last checksum checked; only padding may follow.
        trailer = 0
        while True:
            block = stream.read(CHUNK)
            if not block:
                break
            trailer += len(block)
            if trailer > _MAX_TRAILER or block.strip(b"\x00"):
                self.fail(self.path.name, "has data after the end of the archive", fatal=True)

    def _check_node(self) -> None:
        """The node check agrees with the manifest and carries a good signature by the same keyring."""
        manifest = self.report.manifest
        assert manifest is not None  # _finish stopped otherwise
        self.report.node_check = has_node_check(manifest)
        if self.keyring is None or self.report.signer is None:
            return  # no trusted manifest to compare with
        for member, message in check_node(
            manifest, self._node.get(NODE_SUMS), self._node.get(NODE_SUMS_SIGNATURE), self.keyring
        ):
            self.fail(member, message)


def _kind_of(info: tarfile.TarInfo) -> str:
    """What a member that is not a plain regular file is, in the words of its refusal."""
    kinds = (
        (info.issym, "symlink"),
        (info.islnk, "hard link"),
        (info.ischr, "device node"),
        (info.isblk, "device node"),
        (info.isfifo, "fifo"),
        (info.isdir, "directory"),
        (info.issparse, "sparse file"),
    )
    return next((kind for test, kind in kinds if test()), "special file")


def _is_zstd_failure(exc: ToolError) -> bool:
    argv: list[str] = list(getattr(exc, "argv", None) or [""])
    return argv[0] == "zstd"


def require_bundle(path: PathLike) -> None:
    """:raises UsageError: when the bundle file named on the command line does not exist, is a link to nothing or is a directory (exit 2)."""
    named = Path(path)
    if not os.path.lexists(named):
        raise UsageError(f"the bundle {path} does not exist")
    if not named.exists():  # a link whose target is gone would otherwise read as a damaged archive
        raise UsageError(f"the bundle {path} is a link to {named.readlink()}, which does not exist")
    if named.is_dir():
        raise UsageError(f"the bundle {path} is a directory; name the bundle file")
    try:
        with open(named, "rb") as handle:
            kind = openpgp_kind(handle.read(64))
    except OSError:
        kind = None  # the reader says why it cannot be read
    if kind is not None:  # not "a damaged archive": the key (or signature) was given where the bundle goes
        raise UsageError(f"{path} is {kind}, not a bundle; a key goes after --keyring")


def inspect(path: PathLike) -> Manifest:
    """Read a bundle's manifest without checking its signature (``bundle inspect``; no key needed).

    :raises UsageError: when ``path`` does not exist.
    :raises VerificationError: when the archive has no readable manifest.
    """
    require_bundle(path)
    report = _Scan(Path(path), None, sink=None, stop_early=True).run(manifest_only=True)
    if report.manifest is None:
        problems = report.problems or [Problem(MANIFEST_NAME, "is missing from the archive")]
        raise VerificationError(f"cannot inspect {Path(path).name}: {problems[0]}")
    return report.manifest


def verify(
    path: PathLike,
    keyring: SignatureCheck,
    meter: Optional[Meter] = None,
    policy: Optional[freshness.Policy] = None,
) -> BundleVerifyReport:
    """Check the manifest's signature with ``keyring`` and every member's size and sha256, extracting nothing.

    Returns a report listing every problem in archive order, except that a damaged stream, the cause
    of the rest, comes first (``report.first_bad`` names the first bad member); call
    :meth:`BundleVerifyReport.raise_for_problems` to turn a failure into an error. A bundle past
    the expiry its signed manifest gives is a problem unless ``policy`` allows it.

    :raises UsageError: when ``path`` does not exist.
    """
    require_bundle(path)
    return _Scan(Path(path), keyring, sink=None, stop_early=False, meter=meter, policy=policy).run()


def extract_verified(
    path: PathLike,
    keyring: SignatureCheck,
    staging_dir: PathLike,
    meter: Optional[Meter] = None,
    policy: Optional[freshness.Policy] = None,
) -> VerifiedBundle:
    """Verify ``path`` and extract it into a new private directory below ``staging_dir``.

    Members are checked before their data is read and hashed while written; the first problem
    stops the extraction and removes everything it wrote.

    :raises BundleVerificationError: naming the first bad member.
    """
    staging = Path(staging_dir)
    staging.mkdir(parents=True, exist_ok=True, mode=0o700)
    root = Path(tempfile.mkdtemp(prefix="bundle-", dir=staging))
    try:
        report = _Scan(Path(path), keyring, sink=root, stop_early=True, meter=meter, policy=policy).run()
        report.raise_for_problems()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    assert report.manifest is not None and report.signer is not None
    return VerifiedBundle(root=root, manifest=report.manifest, signer=report.signer)
