"""The bundle's SBOM: an SPDX 2.3 JSON document listing every package with version, checksum and origin.

Deterministic for a given input: the document namespace is derived from the content (a sha256
of the package list), and ``created`` is the bundle's creation time.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

SBOM_NAME = "sbom.spdx.json"


@dataclass(frozen=True)
class SbomPackage:
    """One package as the SBOM lists it."""

    name: str
    version: str
    arch: str
    file: str
    sha256: str
    origin: str
    target: str


def _spdx_id(text: str) -> str:
    return "SPDXRef-Package-" + re.sub(r"[^A-Za-z0-9.-]", "-", text)


def render_spdx(
    *, bundle_name: str, created: str, tool_version: str, packages: Sequence[SbomPackage]
) -> bytes:
    """Render the SPDX 2.3 JSON document (canonical key order, UTF-8)."""
    ordered = sorted(packages, key=lambda p: (p.target, p.name, p.version, p.file))
    digest = hashlib.sha256("\n".join(f"{p.file} {p.sha256}" for p in ordered).encode()).hexdigest()
    spdx_packages = []
    for pkg in ordered:
        spdx_packages.append(
            {
                "SPDXID": _spdx_id(f"{pkg.target}-{pkg.name}-{pkg.version}"),
                "name": pkg.name,
                "versionInfo": pkg.version,
                "packageFileName": pkg.file,
                "downloadLocation": pkg.origin or "NOASSERTION",
                "supplier": "Organization: NVIDIA Corporation",
                "filesAnalyzed": False,
                "licenseConcluded": "NOASSERTION",
                "licenseDeclared": "NOASSERTION",
                "copyrightText": "NOASSERTION",
                "checksums": [{"algorithm": "SHA256", "checksumValue": pkg.sha256}],
                "comment": f"bundle target {pkg.target}, architecture {pkg.arch}",
                "externalRefs": [
                    {
                        "referenceCategory": "PACKAGE-MANAGER",
                        "referenceType": "purl",
                        "referenceLocator": _purl(pkg),
                    }
                ],
            }
        )
    document = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": bundle_name,
        "documentNamespace": f"https://gpu-airgap.invalid/spdx/{bundle_name}-{digest[:32]}",
        "creationInfo": {"created": created, "creators": [f"Tool: gpu-airgap-{tool_version}"]},
        "packages": spdx_packages,
        "relationships": [
            {
                "spdxElementId": "SPDXRef-DOCUMENT",
                "relationshipType": "DESCRIBES",
                "relatedSpdxElement": p["SPDXID"],
            }
            for p in spdx_packages
        ],
    }
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _purl(pkg: SbomPackage) -> str:
    kind = "deb" if pkg.target.startswith("deb-") else "rpm"
    version = pkg.version.replace("~", "%7E").replace(":", "%3A")
    return f"pkg:{kind}/nvidia/{pkg.name}@{version}?arch={pkg.arch}"
