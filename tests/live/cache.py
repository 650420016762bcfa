"""Build-once caches for the live tests: ``$GPU_AIRGAP_TEST_CACHE`` or ``~/.cache/gpu-airgap-tests``.

A build happens in a scratch directory beside the final one, under a lock, and is renamed into
place only when complete, so parallel sessions share one build and a killed build leaves nothing
half-made behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

_DONE = ".complete"


def cache_root() -> Path:
    """Where the live caches live (the same root as the upstream tree's cache)."""
    configured = os.environ.get("GPU_AIRGAP_TEST_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "gpu-airgap-tests"


def digest(*parts: str | bytes) -> str:
    """A short key from the inputs of a build."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_dir(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """Return ``<cache>/<name>/<key>``, calling ``build(scratch)`` once to fill it if it is missing."""
    base = cache_root() / name
    final = base / key
    with locked(base / f"{key}.lock"):
        if not (final / _DONE).is_file():
            scratch = base / f"{key}.partial-{os.getpid()}"
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.rmtree(final, ignore_errors=True)
            scratch.mkdir(parents=True)
            build(scratch)
            (scratch / _DONE).write_text("")
            os.replace(scratch, final)
    return final
