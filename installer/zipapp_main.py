"""The node zipapp's ``__main__.py``: run from a verified extracted copy, so bytecode caching works.

Python cannot write ``__pycache__`` inside a zip, so a zipapp recompiles every module it imports
on every start (about 0.9 s for ``--help`` with typer, click and rich). This file is copied
verbatim into ``gpu-airgap-node.pyz`` as its ``__main__.py`` (see :mod:`mirror.bundle.zipapp`). On the
first run it extracts the archive into ``<cache>/node-<sha256 of the .pyz>`` (private: 0700, owned
by the running user, made complete in a temporary directory, then renamed into place); later runs
check that directory and import from it, so each Python version compiles once and keeps its own
``__pycache__`` files side by side. The archive is read once: the copy is extracted from the very
bytes that were hashed, so a file swapped in after the hash (the .pyz may sit in a folder others can
write) never lands in a copy named after the genuine one. The cache directory must itself be
private (a real directory, owned by the running user, no access for group or others): another one
is refused with a warning. When no private cache directory can be used, the tool runs straight
from the zip: slower, never wrong.

The cache is ``$GPU_AIRGAP_NODE_CACHE`` if set, else ``/var/cache/gpu-airgap`` for root, else
``$XDG_CACHE_HOME/gpu-airgap`` or ``~/.cache/gpu-airgap``. Only the standard library is used here:
this runs before the bundled packages are importable from the cache.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Optional, Union

CACHE_ENV = "GPU_AIRGAP_NODE_CACHE"
MARKER = ".gpu-airgap-node"
PREFIX = "node-"
#: extracted copies not used for this long are removed when a new one is made
STALE_SECONDS = 14 * 24 * 3600
#: open flags for an extracted file: a new file, never through a symlink (``|=`` because vermin
#: reads ``a | b`` at module level as a 3.10 union type)
_CREATE_NEW = os.O_WRONLY
_CREATE_NEW |= os.O_CREAT
_CREATE_NEW |= os.O_EXCL
_CREATE_NEW |= os.O_NOFOLLOW


def cache_base() -> Path:
    """The directory that holds extracted copies, per the module docstring."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    # root gets a system path: under sudo, $HOME may still be the invoking user's home.
    if os.geteuid() == 0:
        return Path("/var/cache/gpu-airgap")
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gpu-airgap"


def _private_dir(path: Path) -> bool:
    """True when ``path`` is a real directory owned by us that nobody else can write to or read."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077


def _usable(directory: Path, digest: str) -> bool:
    """True when ``directory`` is a private, complete extraction of the archive with ``digest``."""
    if not _private_dir(directory):
        return False
    try:
        return (directory / MARKER).read_text(encoding="ascii") == digest + "\n"
    except (OSError, UnicodeDecodeError):
        return False


def _extract(archive: bytes, destination: Path, digest: str) -> None:
    """Write every member of ``archive`` (the bytes hashed) under ``destination`` (fresh and private), marker last."""
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        for info in zf.infolist():
            name = info.filename
            parts = name.split("/")
            if name.startswith("/") or "\\" in name or ".." in parts or info.is_dir():
                continue  # never in an archive we build; refuse rather than write outside
            target = destination.joinpath(*parts)
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with os.fdopen(os.open(target, _CREATE_NEW, 0o600), "wb") as out:
                out.write(zf.read(info))
    (destination / MARKER).write_text(digest + "\n", encoding="ascii")


def _prune(base: Path, keep: Path) -> None:
    """Remove other extracted copies (and abandoned temporary ones) not used for a while."""
    cutoff = time.time() - STALE_SECONDS
    for path in base.iterdir():
        if not path.name.startswith(PREFIX) or path == keep or not _private_dir(path):
            continue
        try:
            used = (path / MARKER).stat().st_mtime
        except OSError:
            used = path.lstat().st_mtime
        if used < cutoff:
            shutil.rmtree(path, ignore_errors=True)


def extracted_copy(archive: Union[str, Path], base: Optional[Path] = None) -> Optional[Path]:
    """Return a verified extracted copy of ``archive``, making it if needed; ``None`` if we cannot.

    :param archive: the ``.pyz`` file.
    :param base: the cache directory (default :func:`cache_base`); created 0700 if missing, and
        refused unless it is private to the running user.
    """
    archive = Path(archive)
    try:
        base = base or cache_base()
        if not _private_base(base):
            return None
        data = archive.read_bytes()  # once: hash and extract these bytes, never the path again
        digest = hashlib.sha256(data).hexdigest()
        final = base / (PREFIX + digest[:32])
        if _usable(final, digest):
            os.utime(final / MARKER)  # last use, for _prune
            return final
        if _private_dir(final):  # ours but incomplete or damaged: make it again
            shutil.rmtree(final)
        temporary = Path(tempfile.mkdtemp(prefix=final.name + ".tmp-", dir=base))
        try:
            _extract(data, temporary, digest)
            temporary.rename(final)
        except OSError:
            shutil.rmtree(temporary, ignore_errors=True)
            # Another process may have renamed its copy into place first; use it if it checks out.
            return final if _usable(final, digest) else None
        _prune(base, final)
        return final if _usable(final, digest) else None
    except (OSError, RuntimeError, zipfile.BadZipFile):  # RuntimeError: no home directory to cache in
        return None


def _private_base(base: Path) -> bool:
    """Make ``base`` (0700) if missing; True when it is private, else say why it is not used."""
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    if _private_dir(base):
        return True
    sys.stderr.write(
        f"warning: not using the node tool's cache {base}: it must be a directory (not a link) owned by "
        "this user, with no access for group or others; running from the zipapp (slower)\n"
    )
    return False


def main() -> int:
    """Point ``sys.path`` at the extracted copy (or keep the zip) and run the node CLI."""
    # typer's documented switch for plain click help: the zipapp does not ship rich (and pygments,
    # markdown-it), which were two thirds of its bytes and most of its cold-start compile time.
    os.environ["TYPER_USE_RICH"] = "0"
    archive = sys.path[0]
    if zipfile.is_zipfile(archive):
        copy = extracted_copy(archive)
        if copy is not None:
            sys.path[0] = str(copy)
    from installer.cli.root import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
