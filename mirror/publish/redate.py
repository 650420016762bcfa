"""Sign a kept tree's apt indexes again, with a new date, before ``--rollback`` serves it.

apt keeps the indexes it already has when a repository's InRelease carries an older ``Date`` than
the one it read last: ``apt-get update`` succeeds and changes nothing. The tree a rollback serves
again was published before the one it replaces, so every apt node that had read the newer tree
would stay on it. Each ``InRelease`` of the kept tree is therefore verified with the key that
published it, its ``Date`` set to the rollback's time, and signed again by that key. ``Packages``
and the packages are untouched (the InRelease names their unchanged hashes), and dnf has no such
rule (``repomd.xml`` is read whatever its revision), so yum repos need nothing.

Upstream's own signatures (``--preserve-upstream``) cannot be signed again; for those the caller
warns when a rollback changes an InRelease.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from mirror.publish.promote import marker
from mirror.publish.swap import previous
from mirror.signing.key import OperatorKey
from plumbing.errors import ToolError, UsageError
from plumbing.fsutil import atomic_write
from plumbing.gpg import Keyring

_DATE = re.compile(r"^Date: .*$", re.MULTILINE)


def release_dated(text: str, at: int) -> str:
    """The Release text ``text`` with its one ``Date`` field set to ``at`` (seconds since the epoch).

    :raises ToolError: when ``text`` has no ``Date`` field, or several.
    """
    date = datetime.fromtimestamp(at, tz=timezone.utc).strftime("%a, %d %b %Y %H:%M:%S +0000")
    dated, count = _DATE.subn(f"Date: {date}", text)
    if count != 1:
        raise ToolError(f"the Release text has {count} Date fields, not one")
    return dated


def indexes(tree: Path) -> list[Path]:
    """The ``InRelease`` files of a published tree, in a stable order."""
    return sorted(p for p in tree.rglob("InRelease") if p.is_file() and not p.is_symlink())


def resigner(key: OperatorKey, at: Callable[[], int]) -> Callable[[Path], int]:
    """A function that signs every InRelease of a tree again, dated ``at()``; it returns how many it signed.

    Each file is verified with ``key``'s public key first and exactly the verified text is signed
    again, so a kept tree someone edited is refused instead of blessed. Each file is replaced
    (a new inode: the kept tree's files may be links of the served tree's).

    :raises SignatureError: when an InRelease is not signed by ``key``.
    """

    def resign(tree: Path) -> int:
        found = indexes(tree)
        if not found:
            return 0
        when = at()
        with tempfile.TemporaryDirectory(prefix="gpu-airgap-redate-") as tmp:
            public = Path(tmp) / "operator.asc"
            public.write_bytes(key.public_key())
            with Keyring.open([public], pinned_fingerprint=key.fingerprint) as keyring:
                for path in found:
                    verified = keyring.verify_clearsigned(path.read_bytes(), what=str(path))
                    text = release_dated(verified.text, when)
                    atomic_write(path, key.clearsign(text.encode("utf-8"), at=when))
        return len(found)

    return resign


def for_rollback(
    out: Path,
    sign_key: str | None,
    gnupghome: Path | None,
    *,
    at: Callable[[], int],
    warn: Callable[[str], None],
) -> Callable[[Path], int] | None:
    """What a rollback of ``out`` does to the kept tree before serving it (None: nothing).

    A tree we signed is signed again by the key that published it (``sign_key`` must be that key;
    by default the marker's signer is looked up in ``gnupghome``). A tree with upstream's own
    signatures cannot be, so ``warn`` says when apt nodes would keep the newer indexes.

    :raises UsageError: when the key is not at hand, or ``sign_key`` names another key.
    """
    kept = previous(out)
    mark = marker(kept)
    if mark is None or not indexes(kept):  # nothing to sign; the rollback itself refuses a missing tree
        return None
    if mark.get("preserved_upstream"):
        if any(_differs(path, out / path.relative_to(kept)) for path in indexes(kept)):
            warn(
                f"apt nodes that read the InRelease files {out} serves now keep them: those of the tree "
                "served again carry upstream's signatures, which cannot be dated again"
            )
        return None
    signer = str(mark.get("signer", "")).upper()
    try:
        key = OperatorKey.find(sign_key or signer, gnupghome)
    except UsageError:
        if sign_key:
            raise
        raise UsageError(
            f"cannot roll back {out}: apt ignores an InRelease older than the one it read, so the kept "
            f"tree's are signed again by the key that signed them, {signer}, which is not a secret key "
            f"in {gnupghome or '~/.gnupg'}; name its gpg home with --gnupghome"
        ) from None
    if key.fingerprint.upper() != signer:
        raise UsageError(
            f"--sign-key {sign_key} is key {key.fingerprint}, but the kept tree of {out} was published "
            f"with {signer}, the key its nodes trust; name that key"
        )
    return resigner(key, at)


def _differs(kept: Path, served: Path) -> bool:
    try:
        return kept.read_bytes() != served.read_bytes()
    except OSError:
        return True
