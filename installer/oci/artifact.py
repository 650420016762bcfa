"""The bundle as an OCI artifact: media types, annotations, and its image manifest (pure).

We follow the OCI image-spec 1.1 artifact guidance: an image manifest whose ``artifactType`` is
:data:`ARTIFACT_TYPE` and whose config is the 2-byte empty descriptor (``{}``,
``application/vnd.oci.empty.v1+json``). distribution 2.8 (Debian's ``docker-registry``) stores
and serves that manifest byte for byte, provided the empty blob is uploaded like any other.

Layers, in order:

- a whole bundle is one layer, :data:`BUNDLE_LAYER` plus the compression (``+zstd``, ``+xz``,
  ``+gzip``; nothing for a plain tar);
- a split bundle is its parts (:data:`PART_LAYER`, ``FILE.part001`` first), then its checksum
  list (:data:`SUMS_LAYER`) and the operator's signature over it (:data:`SUMS_SIGNATURE_LAYER`).

Every layer's ``org.opencontainers.image.title`` is the file's name; a pull writes the files under
those names (checked to be plain names in the expected pattern) because a split bundle's signed
checksum list names its parts. Manifest annotations carry the bundle's facts (its manifest digest,
signer, release, targets): hints for people and tools, never trusted — the node trusts only the
operator's signature, checked after the pull exactly as for a file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Sequence, Tuple

from installer.oci.reference import DIGEST_RE
from plumbing.errors import VerificationError

if TYPE_CHECKING:
    from installer.manifest import Manifest

ARTIFACT_TYPE = "application/vnd.gpu-airgap.bundle.v1"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
#: What a pull asks for: our manifest, plus the types a tag may wrongly point at, so we can name them.
ACCEPT = (
    MANIFEST_MEDIA_TYPE,
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
BUNDLE_LAYER = "application/vnd.gpu-airgap.bundle.v1.tar"
PART_LAYER = "application/vnd.gpu-airgap.bundle.part.v1"
SUMS_LAYER = "application/vnd.gpu-airgap.bundle.sha256sums.v1"
SUMS_SIGNATURE_LAYER = "application/vnd.gpu-airgap.bundle.sha256sums.signature.v1"  #: armored OpenPGP
_COMPRESSION_SUFFIX = {"zstd": "+zstd", "xz": "+xz", "gzip": "+gzip", "none": ""}
BUNDLE_LAYERS = tuple(BUNDLE_LAYER + suffix for suffix in _COMPRESSION_SUFFIX.values())

TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
VERSION = "org.opencontainers.image.version"
DESCRIPTION = "org.opencontainers.image.description"
BUNDLE_ID = "vnd.gpu-airgap.bundle.manifest.digest"  #: sha256 of the signed manifest.json (the bundle id)
SIGNER = "vnd.gpu-airgap.bundle.signer"  #: fingerprint of the operator key that signed it
CHANNEL = "vnd.gpu-airgap.bundle.channel"
TARGETS = "vnd.gpu-airgap.bundle.targets"
TOOL_VERSION = "vnd.gpu-airgap.tool.version"

#: A manifest larger than this is refused before it is parsed (distribution's own limit is 4 MiB).
MAX_MANIFEST_BYTES = 4 << 20
#: More layers than a split bundle can have (999 parts plus the checksum list and its signature).
MAX_LAYERS = 1001
_TITLE_RE = re.compile(r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,199}$")
_PART_TITLE_RE = re.compile(r"^(?P<base>.+)\.part(?P<num>[0-9]{3})$")


@dataclass(frozen=True)
class Layer:
    """One file of the bundle as a layer: its media type, digest, size and file name."""

    media_type: str
    digest: str
    size: int
    title: str

    def descriptor(self) -> Dict[str, Any]:
        """The OCI descriptor of this layer."""
        return {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
            "annotations": {TITLE: self.title},
        }


def bundle_layer_type(compression: str) -> str:
    """The layer media type of a whole bundle compressed with ``compression`` (``zstd``, ``xz``, ``gzip``, ``none``)."""
    return BUNDLE_LAYER + _COMPRESSION_SUFFIX[compression]


def render_manifest(layers: Sequence[Layer], annotations: Mapping[str, str]) -> bytes:
    """The image manifest's exact bytes (compact JSON; its sha256 is the artifact's digest)."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": {
            "mediaType": EMPTY_MEDIA_TYPE,
            "digest": EMPTY_DIGEST,
            "size": len(EMPTY_CONFIG),
            "data": "e30=",
        },
        "layers": [layer.descriptor() for layer in layers],
        "annotations": dict(annotations),
    }
    return json.dumps(manifest, separators=(",", ":"), ensure_ascii=True).encode()


class ArtifactError(VerificationError):
    """The manifest a registry served is not a gpu-airgap bundle artifact we can read safely."""


@dataclass(frozen=True)
class BundleArtifact:
    """A checked artifact manifest: the layers to fetch, in order, and the file a node opens."""

    layers: Tuple[Layer, ...]
    annotations: Dict[str, str]

    @property
    def split(self) -> bool:
        """True for a split bundle (parts plus a signed checksum list)."""
        return self.layers[0].media_type == PART_LAYER

    @property
    def entry(self) -> str:
        """The file name ``verify`` and ``install`` take: the bundle, or the first part."""
        return self.layers[0].title

    @property
    def base_name(self) -> str:
        """The bundle's file name (without ``.partNNN`` for a split bundle)."""
        match = _PART_TITLE_RE.match(self.entry)
        return match.group("base") if self.split and match else self.entry


def parse_manifest(data: bytes, where: str) -> BundleArtifact:
    """Check that ``data`` is a gpu-airgap bundle manifest and return its layers.

    :param where: the reference, for messages.
    :raises ArtifactError: for anything else, naming the first problem.
    """
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ArtifactError(f"{where} did not serve a JSON manifest ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
        raise ArtifactError(f"{where} is not an OCI image manifest")
    if doc.get("mediaType", MANIFEST_MEDIA_TYPE) != MANIFEST_MEDIA_TYPE:
        raise ArtifactError(f"{where} is a {doc.get('mediaType')}, not a gpu-airgap bundle ({ARTIFACT_TYPE})")
    kind = doc.get("artifactType") or (doc.get("config") or {}).get("mediaType")
    if kind != ARTIFACT_TYPE:
        raise ArtifactError(
            f"{where} is a {kind or 'container image'} artifact, not a gpu-airgap bundle ({ARTIFACT_TYPE})"
        )
    raw_layers = doc.get("layers")
    if not isinstance(raw_layers, list) or not raw_layers or len(raw_layers) > MAX_LAYERS:
        raise ArtifactError(f"{where} has no layers or too many")
    layers = tuple(_layer(item, where) for item in raw_layers)
    _check_shape(layers, where)
    annotations = doc.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise ArtifactError(f"{where} has malformed annotations")
    return BundleArtifact(layers, {str(k): str(v) for k, v in annotations.items()})


def _layer(item: object, where: str) -> Layer:
    if not isinstance(item, dict):
        raise ArtifactError(f"{where} has a malformed layer descriptor")
    media_type, digest, size = item.get("mediaType"), item.get("digest"), item.get("size")
    title = (item.get("annotations") or {}).get(TITLE)
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise ArtifactError(f"{where} has a layer whose digest is not sha256:<64 hex digits>")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ArtifactError(f"{where} has a layer with a malformed size")
    if not isinstance(title, str) or not _TITLE_RE.match(title):
        raise ArtifactError(f"{where} has a layer without a plain file name in {TITLE}")
    if media_type not in (*BUNDLE_LAYERS, PART_LAYER, SUMS_LAYER, SUMS_SIGNATURE_LAYER):
        raise ArtifactError(f"{where} has a layer of unknown media type {media_type!r}")
    return Layer(str(media_type), digest, size, title)


def _check_shape(layers: Tuple[Layer, ...], where: str) -> None:
    """One whole-bundle layer, or parts in order followed by the checksum list and its signature."""
    types = [layer.media_type for layer in layers]
    if len(layers) == 1 and types[0] in BUNDLE_LAYERS:
        return
    parts = layers[:-2]
    if (
        not parts
        or any(t != PART_LAYER for t in types[:-2])
        or types[-2:] != [SUMS_LAYER, SUMS_SIGNATURE_LAYER]
    ):
        raise ArtifactError(
            f"{where} is neither one bundle layer nor split parts followed by their signed checksum list"
        )
    first = _PART_TITLE_RE.match(parts[0].title)
    base = first.group("base") if first else ""
    expected: List[str] = [f"{base}.part{n:03d}" for n in range(1, len(parts) + 1)]
    expected += [f"{base}.sha256sums", f"{base}.sha256sums.asc"]
    found = [layer.title for layer in layers]
    if not base or found != expected:
        raise ArtifactError(
            f"{where} names its split files {', '.join(found[:3])}…, not BASE.part001… in order"
        )


def annotations_for(manifest: Manifest, *, bundle_id: str, signer: str) -> Dict[str, str]:
    """The manifest annotations of a verified bundle: what it is, who signed it, its manifest digest."""
    return {
        TITLE: f"NVIDIA Container Toolkit {manifest.toolkit_version} bundle",
        DESCRIPTION: "A gpu-airgap bundle: verify with the operator key (gpu-airgap bundle pull/install oci://...)",
        CREATED: manifest.created,
        VERSION: manifest.toolkit_version,
        BUNDLE_ID: f"sha256:{bundle_id}",
        SIGNER: signer,
        CHANNEL: manifest.channel,
        TARGETS: ",".join(f"{t.format}/{t.arch}" for t in manifest.targets),
        TOOL_VERSION: manifest.tool_version,
    }
