"""The node check: what a node verifies with its own tools before it runs anything from a bundle.

``install.sh`` and ``gpu-airgap-node.pyz`` come out of the bundle and run as root, and the
manifest's signature is checked by that very zipapp: verifying the bundle with code taken from the
bundle proves nothing. So every bundle carries ``NODE-SHA256SUMS`` (``sha256sum`` format, listing
exactly those two files) and ``NODE-SHA256SUMS.asc``, the operator's detached signature over it,
right after the manifest. The node admin checks them with the node's own ``tar``, ``gpg``
(``--dearmor``: gpgv reads only binary keyrings), ``gpgv`` and ``sha256sum`` against the operator
key, and only then runs ``install.sh``: :func:`node_command` renders that command line, which
``bundle build`` prints and README shows. The fleet paths (the Ansible role, the DaemonSet's
program) make the same check before they run the tool.

The manifest lists both files too, so the full verification (``bundle verify``, ``install``)
covers them and :func:`check` confirms the list agrees with the manifest and carries a good
signature by the same key: a bundle that passes one check passes the other.

Node side: python3.9-compatible, stdlib only.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from typing import Dict, List, Optional, Tuple

from installer.archive import SignatureCheck
from installer.manifest import Manifest
from plumbing.errors import VerificationError
from plumbing.keyfile import parse_fingerprint

NODE_SUMS = "NODE-SHA256SUMS"
NODE_SUMS_SIGNATURE = "NODE-SHA256SUMS.asc"
INSTALL_SH = "install.sh"
NODE_TOOL = "gpu-airgap-node.pyz"
#: what the checksum list covers: everything the node runs before the bundle is verified
NODE_FILES = (INSTALL_SH, NODE_TOOL)
#: the members a node takes out first, in the order the builder writes them after the manifest
HEAD = (NODE_SUMS, NODE_SUMS_SIGNATURE, INSTALL_SH, NODE_TOOL)
#: the list and its signature are a few hundred bytes; anything bigger is not ours
MAX_SUMS_SIZE = 64 << 10
#: the node command's private copy of the operator key, and that copy dearmored (gpgv cannot read an
#: armored key), and gpgv's status lines, all in its private directory
PRIVATE_KEY = "operator.asc"
DEARMORED_KEY = "operator.gpg"
GPGV_STATUS = "gpgv.status"

# How every first check on a node (the node command, install.sh, the Ansible role's
# verify-node-tool.sh; the DaemonSet's program in Python) decides, from gpgv's status lines and not
# its exit status: gpgv exits 2 when any signature is by a key its keyring lacks, so a bundle that
# the old and the new operator key both signed (a rotation) would be refused on a node holding one.
# The node tool's policy (plumbing/gpg.py judge_status), in grep: refused outright on a bad signature
# or one by an expired or revoked key; otherwise good with a VALIDSIG made with a SHA-2 (or SHA-3)
# digest whose primary-key fingerprint (its last field) is the pinned one, or any key of the file
# when none is pinned. The shell scripts carry these texts literally (tests/test_node_rotation.py).
#: gpgv's options: SHA-1 refused by gpgv itself (it says so), status lines on stdout
GPGV_OPTIONS = "--weak-digest SHA1 --status-fd 1"
#: grep -E: a status line that refuses the check whatever else it says
REFUSING_STATUS = r"^\[GNUPG:\] (BADSIG|EXPKEYSIG|REVKEYSIG) "
#: grep -E: a good signature's line up to its primary-key fingerprint (field 8 the digest: 8-11 SHA-2, 12/14 SHA-3)
GOOD_SIGNATURE = r"^\[GNUPG:\] VALIDSIG ([^ ]+ ){7}(8|9|1[0-24]) [^ ]+ "
#: the fingerprint part of :data:`GOOD_SIGNATURE` when no key is pinned
ANY_KEY = "[0-9A-F]{40}"

_LINE = re.compile(r"^([0-9a-f]{64})  (\S+)$")


def render_sums(files: Mapping[str, bytes]) -> bytes:
    """``NODE-SHA256SUMS`` for ``files`` (name -> content), in ``sha256sum`` format and :data:`NODE_FILES` order."""
    return "".join(f"{hashlib.sha256(files[name]).hexdigest()}  {name}\n" for name in NODE_FILES).encode(
        "ascii"
    )


def parse_sums(data: bytes) -> Dict[str, str]:
    """Name -> sha256 of a ``NODE-SHA256SUMS`` (only ever called on bytes whose signature checked out).

    :raises VerificationError: for a line that is not ``<sha256>  <name>``, or a name listed twice.
    """
    sums: Dict[str, str] = {}
    for line in data.decode("ascii", "replace").splitlines():
        match = _LINE.match(line)
        if match is None or match.group(2) in sums:
            raise VerificationError(f"{NODE_SUMS} has a malformed or repeated line {line[:80]!r}")
        sums[match.group(2)] = match.group(1)
    return sums


def has_node_check(manifest: Manifest) -> bool:
    """True when the bundle carries the node check (built by a gpu-airgap that makes it)."""
    return NODE_SUMS in manifest.members()


#: what the node tool says about a bundle without the node check (built by an older gpu-airgap)
MISSING_NOTE = (
    f"this bundle has no {NODE_SUMS} (an older gpu-airgap built it), so its install.sh and node tool "
    "cannot be checked with the node's own tools before they run; rebuild it with this gpu-airgap"
)


def check(
    manifest: Manifest, sums: Optional[bytes], signature: Optional[bytes], keyring: SignatureCheck
) -> List[Tuple[str, str]]:
    """Problems, as ``(member, message)``, with the node check of a bundle whose manifest verified.

    The manifest already vouches for the bytes of both files; this confirms what the node command
    concludes from them: the signature is good by a key of ``keyring`` and the list names exactly
    :data:`NODE_FILES` with the digests the manifest gives. A bundle without the check has no problem
    here (see :data:`MISSING_NOTE`).

    :param sums: the content of ``NODE-SHA256SUMS`` as read from the archive (None: not read).
    :param signature: the content of ``NODE-SHA256SUMS.asc`` (None: not read).
    """
    members = manifest.members()
    if NODE_SUMS not in members:
        return []
    if NODE_SUMS_SIGNATURE not in members:
        return [
            (
                NODE_SUMS_SIGNATURE,
                f"is not listed in the signed manifest, so {NODE_SUMS} cannot be checked on the node",
            )
        ]
    if sums is None or signature is None:
        return []  # not in the archive: the reader already names the missing member
    try:
        keyring.verify_detached(sums, signature, what=NODE_SUMS)
    except VerificationError as exc:
        return [(NODE_SUMS_SIGNATURE, f"does not verify with the operator key ({exc})")]
    try:
        listed = parse_sums(sums)
    except VerificationError as exc:
        return [(NODE_SUMS, str(exc))]
    expected = {name: members[name][1] for name in NODE_FILES if name in members}
    if listed != expected:
        differ = sorted(set(listed) ^ set(expected) | {n for n in listed if listed[n] != expected.get(n)})
        return [(NODE_SUMS, f"disagrees with the signed manifest about {', '.join(differ)}")]
    return []


def node_command(bundle: str, key: str = "operator.asc", fingerprint: Optional[str] = None) -> str:
    """The command a node admin runs first: copy out, check the copies with the node's own tools, run them.

    The admin's directory may be writable by others (a user-mounted USB disk, a shared upload folder),
    so nothing is checked or run there: ``mktemp -d`` makes a private directory (0700, owned by the
    admin, under ``/tmp`` named explicitly whatever ``TMPDIR`` says: its sticky bit keeps others from
    renaming it away and putting their own in its place), the operator key is copied into it and ``tar`` takes the
    checksum list, its signature, ``install.sh`` and the zipapp out into it (``--occurrence`` stops
    reading once it has them, so it is quick and works on ``FILE.part001`` of a split bundle). Then
    ``gpg --dearmor`` turns the key copy into the binary keyring ``gpgv`` needs, ``gpgv`` checks the
    list's signature and ``grep`` decides from its status lines (see :data:`GOOD_SIGNATURE`: a
    second signature by a key the node lacks is no refusal), ``sha256sum -c`` checks the two files,
    and only then ``sh`` runs the checked ``install.sh`` from the private directory, with the checked
    key copy. Every step must succeed before the next runs (``&&``); install options go at the end.
    ``$d`` stays set in the admin's shell, so the checked tool can be run again as
    ``python3 -I -S "$d/gpu-airgap-node.pyz" ...``.

    :param bundle: the bundle file (or its ``.part001``) as the admin names it.
    :param key: the operator's public key file the admin was given.
    :param fingerprint: the operator key to trust of that file (``--fingerprint``): only its signature
        counts, and ``install.sh`` and the tool are given it too. None: any key of the file.
    """
    b, k = shlex.quote(bundle), shlex.quote(key)
    pin = "" if fingerprint is None else parse_fingerprint(fingerprint)
    status, signer = f'"$d/{GPGV_STATUS}"', f" {pin}" if pin else ""
    decide = (
        f"! grep -Eq '{REFUSING_STATUS}' {status}"
        f" && grep -Eq '{GOOD_SIGNATURE}{pin or ANY_KEY}$' {status}"
        f" || {{ echo '{NODE_SUMS_SIGNATURE}: no good signature by the operator key{signer};"
        " nothing from the bundle ran' >&2; false; }"
    )
    return " && ".join(
        (
            "d=$(mktemp -d /tmp/gpu-airgap.XXXXXX)",
            f'cp {k} "$d/{PRIVATE_KEY}"',
            f'tar --occurrence -xf {b} -C "$d" {" ".join(HEAD)}',
            f'gpg --batch --yes --dearmor -o "$d/{DEARMORED_KEY}" "$d/{PRIVATE_KEY}"',
            f'{{ gpgv {GPGV_OPTIONS} --keyring "$d/{DEARMORED_KEY}" "$d/{NODE_SUMS_SIGNATURE}" "$d/{NODE_SUMS}"'
            f" >{status}; {decide}; }}",
            f'(cd "$d" && sha256sum -c {NODE_SUMS})',
            f'sh "$d/{INSTALL_SH}" {b} --keyring "$d/{PRIVATE_KEY}"'
            + (f" --fingerprint {pin}" if pin else ""),
        )
    )
