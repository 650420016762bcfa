"""Push a signed bundle to a registry and pull it back, verified exactly as a bundle file is.

- :func:`push_bundle` verifies the bundle with the operator key (nothing unverifiable is
  published), uploads its files as layers (blobs the registry already has are skipped), then the
  empty config, then the manifest under the tag, and returns the manifest digest.
- :func:`resolve` and :func:`download` resolve the reference to a manifest digest once, checks the manifest is a
  bundle artifact, then stream every layer by digest into a private directory, each checked
  against its digest and size as it arrives.
- :func:`pull_verified` (``bundle pull``) adds the operator-key verification and only then moves
  the files to ``--output``; :func:`fetched` (``install oci://``) hands the private copy to the
  installer, which verifies it while extracting, as it does for a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Tuple

from installer.archive import CHUNK, detect_compression, split_parts
from installer.freshness import Policy
from installer.oci import artifact
from installer.oci.client import RegistryAccess, RegistryClient
from installer.oci.reference import Reference
from plumbing.errors import ToolError, UsageError
from plumbing.fsutil import safe_join

if TYPE_CHECKING:
    from installer.bundle_report import BundleVerifyReport

Log = Optional[Callable[[str], None]]
_SPOOL_DIRS = ("/var/tmp",)  #: disk-backed, unlike a tmpfs /tmp; ``$TMPDIR`` comes first


@dataclass
class PushResult:
    """What ``bundle push`` stored: the tag, the manifest digest and every layer."""

    reference: Reference
    digest: str
    bundle_id: str
    signer: str
    layers: List[artifact.Layer] = field(default_factory=list)
    uploaded: List[str] = field(default_factory=list)  #: digests sent (the others were already there)

    def to_dict(self) -> Dict[str, object]:
        """The ``--json`` object."""
        return {
            "reference": str(self.reference),
            "digest": self.digest,
            "pinned": str(self.reference.pinned(self.digest)),
            "bundle_id": self.bundle_id,
            "signer": self.signer,
            "layers": [
                {**layer.descriptor(), "uploaded": layer.digest in self.uploaded} for layer in self.layers
            ],
        }


@dataclass(frozen=True)
class Pulled:
    """A bundle pulled into a directory: the file to open (the bundle or its first part) and its source."""

    entry: Path
    files: Tuple[Path, ...]  #: in layer order
    reference: Reference
    digest: str  #: the manifest digest the reference resolved to
    split: bool = False

    @property
    def pinned(self) -> Reference:
        """The reference by manifest digest."""
        return self.reference.pinned(self.digest)


@dataclass(frozen=True)
class PullResult:
    """What ``bundle pull`` wrote and what verifying it found."""

    pulled: Pulled
    report: BundleVerifyReport


def bundle_files(entry: Path) -> List[Tuple[Path, str]]:
    """The files of the bundle ``entry`` names, in layer order, with their layer media types."""
    split = split_parts(entry)
    if split is None:
        with open(entry, "rb") as fh:
            head = fh.read(8)
        return [(entry, artifact.bundle_layer_type(detect_compression(head)))]
    base, parts = split
    files = [(part, artifact.PART_LAYER) for part in parts]
    sums = base.with_name(base.name + ".sha256sums")
    return [
        *files,
        (sums, artifact.SUMS_LAYER),
        (sums.with_name(sums.name + ".asc"), artifact.SUMS_SIGNATURE_LAYER),
    ]


def push_bundle(
    entry: Path,
    ref: Reference,
    keyring: Path,
    client: RegistryClient,
    log: Log = None,
    *,
    fingerprint: Optional[str] = None,
    policy: Optional[Policy] = None,
) -> PushResult:
    """Verify ``entry`` with ``keyring``, then store it as the artifact ``ref`` (a tag).

    :raises BundleVerificationError: the bundle does not verify (nothing is pushed).
    """
    from installer import bundle as bundle_lib
    from installer.source import bundle_id
    from plumbing.gpg import Keyring

    if ref.tag is None:
        raise UsageError(
            f"push to a tag (oci://{ref.host}/{ref.repository}:TAG); the registry names the digest"
        )
    _say(log, f"verifying {entry.name} with {keyring}")
    with Keyring.open_signer(keyring, fingerprint=fingerprint) as keys:
        report = bundle_lib.verify(entry, keys, policy=policy)
    report.raise_for_problems()
    assert report.manifest is not None and report.signer is not None
    result = PushResult(ref, "", bundle_id(report.manifest), report.signer)
    for path, media_type in bundle_files(entry):
        digest, size = _file_digest(path)
        _say(log, f"uploading {path.name} ({size} bytes, {digest})")
        if client.upload_blob(ref.repository, digest, size, _reader(path)):
            result.uploaded.append(digest)
        result.layers.append(artifact.Layer(media_type, digest, size, path.name))
    client.upload_blob(
        ref.repository,
        artifact.EMPTY_DIGEST,
        len(artifact.EMPTY_CONFIG),
        lambda: io.BytesIO(artifact.EMPTY_CONFIG),
    )
    notes = artifact.annotations_for(report.manifest, bundle_id=result.bundle_id, signer=result.signer)
    result.digest = client.put_manifest(
        ref, artifact.render_manifest(result.layers, notes), artifact.MANIFEST_MEDIA_TYPE
    )
    return result


def resolve(ref: Reference, client: RegistryClient) -> Tuple[artifact.BundleArtifact, str]:
    """Fetch ``ref``'s manifest (a tag is resolved here, once) and check it is a bundle artifact.

    :raises ArtifactError: ``ref`` is not a gpu-airgap bundle.
    :raises DigestMismatch: the manifest is not what its digest names.
    """
    data, digest = client.get_manifest(ref, artifact.ACCEPT)
    return artifact.parse_manifest(data, str(ref)), digest


def download(
    ref: Reference,
    found: artifact.BundleArtifact,
    digest: str,
    dest: Path,
    client: RegistryClient,
    log: Log = None,
) -> Pulled:
    """Stream every layer of ``found`` by digest into the private directory ``dest``, each checked as it arrives.

    :raises DigestMismatch: a blob is not what its digest and size name (its file is removed).
    """
    total = sum(layer.size for layer in found.layers)
    free = shutil.disk_usage(dest).free
    if total > free:
        raise ToolError(f"{ref} needs {total} bytes but {dest} has only {free} free")
    _say(log, f"pulling {ref.pinned(digest)} ({len(found.layers)} layer(s), {total} bytes)")
    files = []
    for layer in found.layers:
        target = safe_join(dest, layer.title)
        client.fetch_blob(ref.repository, layer.digest, layer.size, target)
        files.append(target)
    return Pulled(safe_join(dest, found.entry), tuple(files), ref, digest, found.split)


def pull_verified(
    ref: Reference,
    output: Path,
    keyring: Path,
    access: RegistryAccess,
    log: Log = None,
    *,
    fingerprint: Optional[str] = None,
    policy: Optional[Policy] = None,
) -> PullResult:
    """``bundle pull``: fetch, verify with ``keyring`` like ``bundle verify``, then move the files to ``output``.

    ``output`` is the bundle file to write (a split bundle's parts become ``OUTPUT.partNNN``, and
    its name must be the one the signed checksum list uses) or an existing directory (the files
    keep their names). Nothing is written there unless every digest and the signature check out.

    :raises BundleVerificationError: the signature or a member is bad (exit 3).
    """
    from installer import bundle as bundle_lib
    from plumbing.gpg import Keyring

    client = RegistryClient.for_reference(ref, access)
    found, digest = resolve(ref, client)
    if found.split and not output.is_dir() and output.name != found.base_name:
        raise UsageError(
            f"{ref} is a split bundle whose signed checksum list names its parts {found.base_name}.partNNN; "
            f"pass --output {output.parent / found.base_name} or a directory"
        )
    work = Path(
        tempfile.mkdtemp(prefix=".gpu-airgap-pull-", dir=output if output.is_dir() else output.parent)
    )
    try:
        pulled = download(ref, found, digest, work, client, log)
        _say(log, f"verifying {pulled.entry.name} with {keyring}")
        with Keyring.open_signer(keyring, fingerprint=fingerprint) as keys:
            report = bundle_lib.verify(pulled.entry, keys, policy=policy)
        report.raise_for_problems()
        return PullResult(_place(pulled, output), report)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _place(pulled: Pulled, output: Path) -> Pulled:
    """Move the verified files to ``output`` (the same filesystem as the private directory: atomic renames)."""
    if output.is_dir() or pulled.split:
        directory = output if output.is_dir() else output.parent
        names = {source: directory / source.name for source in pulled.files}
    else:
        names = {pulled.entry: output}
    for source, target in names.items():
        os.replace(source, target)
    if pulled.split:  # parts of an older, longer split bundle would be read as part of this one
        entry = names[pulled.entry]
        number = len(pulled.files) - 1  # the parts, then the checksum list and its signature
        while (stale := entry.with_name(f"{entry.name[: -len('.part001')]}.part{number:03d}")).exists():
            stale.unlink()
            number += 1
    return Pulled(names[pulled.entry], tuple(names.values()), pulled.reference, pulled.digest, pulled.split)


@contextlib.contextmanager
def fetched(ref: Reference, access: RegistryAccess, log: Log = None) -> Iterator[Pulled]:
    """``install oci://``: the bundle pulled into a private spool directory, removed afterwards.

    Only digests are checked here; the installer verifies the signature while extracting, as for a file.
    """
    client = RegistryClient.for_reference(ref, access)
    found, digest = resolve(ref, client)
    work = Path(tempfile.mkdtemp(prefix="gpu-airgap-pull-", dir=_spool_dir()))
    try:
        yield download(ref, found, digest, work, client, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _spool_dir() -> Optional[str]:
    if os.environ.get("TMPDIR"):
        return None  # tempfile honours it
    return next((d for d in _SPOOL_DIRS if Path(d).is_dir() and os.access(d, os.W_OK)), None)


def _file_digest(path: Path) -> Tuple[str, int]:
    hasher = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            hasher.update(block)
            size += len(block)
    return "sha256:" + hasher.hexdigest(), size


def _reader(path: Path) -> Callable[[], IO[bytes]]:
    """Open ``path`` afresh for each attempt of an upload (an auth retry sends the body again)."""
    return lambda: open(path, "rb")


def _say(log: Log, line: str) -> None:
    if log is not None:
        log(line)
