"""FIPS nodes: an rpm whose file digests are MD5 or SHA-1 does not install on them.

With FIPS mode on (``/proc/sys/crypto/fips_enabled`` is ``1``), rpm cannot compute MD5 or SHA-1,
so it cannot check the files of a package that lists only those digests and the install fails
half-way ("cpio: Digest mismatch", "does not verify: no digest"); RPM 6 (Fedora 43) refuses them
even without FIPS. NVIDIA built its toolkit rpms with MD5 file digests up to 1.18.0
(NVIDIA/nvidia-container-toolkit#1476 and #116: 1.16.x and 1.17.8 fail on FIPS RHEL/Rocky;
#1307: RPM 6 on Fedora 43) and rebuilt them with SHA256 digests from 1.18.1 on (PR #1411,
merged after the 1.18.0 release; PR #1500 and #1612 kept them so). So preflight refuses such a
bundle on a FIPS node before anything changes, and ``bundle build`` warns when it builds one.

The algorithm is the rpm header's FILEDIGESTALGO (tag 5011; RFC 4880 hash ids, absent = MD5).
The builder reads it from each verified rpm and records it per package in the signed manifest
(``file_digest_algo``); for a bundle built before that field the node asks its own rpm about the
verified file (``rpm -qp --qf '%{FILEDIGESTALGO}'``), since the node tool carries no rpm reader.
Node side: python3.9, stdlib only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from installer.target import StagedPackage
from plumbing.errors import ToolError
from plumbing.fsutil import rooted
from plumbing.proc import run

#: The first toolkit release whose rpms carry SHA256 file digests.
FIRST_FIPS_RELEASE = "1.18.1"
#: Where the kernel says whether FIPS mode is on (a node path, read under the root).
FIPS_ENABLED = "/proc/sys/crypto/fips_enabled"
#: rpm's FILEDIGESTALGO values (RFC 4880 hash algorithm ids) -> names.
DIGEST_NAMES: Dict[int, str] = {
    1: "md5",
    2: "sha1",
    3: "ripemd160",
    8: "sha256",
    9: "sha384",
    10: "sha512",
    11: "sha224",
}
#: File digests rpm can check with FIPS mode on.
FIPS_DIGESTS = frozenset({"sha224", "sha256", "sha384", "sha512"})

#: ``(package name, file digest algorithm or None when unknown)`` of each rpm of a target.
Digests = Sequence[Tuple[str, Optional[str]]]


def digest_name(algo: Optional[int]) -> str:
    """The name of rpm's FILEDIGESTALGO value; no tag at all means MD5, as rpm reads it.

    >>> digest_name(8), digest_name(None)
    ('sha256', 'md5')
    """
    if algo is None:
        return "md5"
    return DIGEST_NAMES.get(algo, f"algorithm {algo}")


def fips_enabled(root: Path) -> bool:
    """True when the kernel under ``root`` runs in FIPS mode (``fips_enabled`` is 1)."""
    try:
        return rooted(root, FIPS_ENABLED).read_text(encoding="ascii").strip() == "1"
    except (OSError, UnicodeDecodeError):
        return False


def rpm_query(path: Path) -> Optional[str]:
    """The file digest algorithm of the verified rpm ``path``, as the node's own rpm reads it; None: rpm failed."""
    try:
        result = run(["rpm", "-qp", "--qf", "%{FILEDIGESTALGO}", str(path)], check=False, timeout=60)
    except ToolError:
        return None
    text = result.stdout.decode("ascii", "replace").strip()
    if result.returncode != 0:
        return None
    return digest_name(int(text)) if text.isdigit() else digest_name(None)  # "(none)": no tag, MD5


def weak_packages(digests: Digests) -> List[Tuple[str, str]]:
    """``(name, algorithm)`` of every package whose file digests rpm cannot check in FIPS mode."""
    return [(name, algo or "an unknown algorithm") for name, algo in digests if algo not in FIPS_DIGESTS]


def fips_problem(packages: Sequence[StagedPackage], query: Callable[[Path], Optional[str]]) -> Optional[str]:
    """One sentence refusing rpms that would not install on a FIPS node, or None.

    :param query: reads the algorithm from a verified rpm, for a bundle whose manifest does not record it.
    """
    weak = weak_packages([(p.name, p.file_digest_algo or query(p.path)) for p in packages])
    if not weak:
        return None
    named = ", ".join(f"{name} {algo}" for name, algo in weak)
    return (
        f"this node runs in FIPS mode, where rpm cannot check MD5 or SHA-1 file digests, and the bundle's "
        f"rpms carry only those ({named}); build the bundle from toolkit {FIRST_FIPS_RELEASE} or later, "
        "whose rpms carry SHA256 digests"
    )


def build_warning(target: str, release: str, digests: Digests) -> Optional[str]:
    """The builder's warning for a target whose rpms would not install on FIPS nodes, or None."""
    weak = weak_packages(digests)
    if not weak:
        return None
    return (
        f"{target}: the toolkit {release} rpms carry only {'/'.join(sorted({a for _, a in weak}))} file digests; "
        f"they will not install on FIPS nodes or with RPM 6 (toolkit {FIRST_FIPS_RELEASE} and later carry SHA256 digests)"
    )


def fips_readiness(digests: Digests) -> str:
    """``bundle inspect``'s line for an rpm target: whether its rpms install on FIPS nodes."""
    if any(algo is None for _, algo in digests):
        return "FIPS nodes: not recorded (built before gpu-airgap recorded file digests; the node's rpm reads them)"
    weak = sorted({algo for _, algo in weak_packages(digests)})
    if weak:
        return (
            f"FIPS nodes: no, the rpms carry {'/'.join(weak)} file digests "
            f"(toolkit {FIRST_FIPS_RELEASE} and later carry SHA256)"
        )
    return f"FIPS nodes: yes, {'/'.join(sorted({str(algo) for _, algo in digests}))} file digests"
