"""A faithful local copy of NVIDIA's package repositories, and an HTTP server with faults, for tests and the demo.

Build: :func:`build_upstream` / :func:`cached_upstream` -> :class:`UpstreamTree`; :func:`real_upstream`
is the real-packages profile (NVIDIA's toolkit 1.20.0-1 built from source, :mod:`tests.upstream.prebuilt`).
Serve: :class:`UpstreamServer` (context manager, ``.url``, ``.log``, ``.inject(path, Fault...)``).
Command line: ``python -m tests.upstream build DIR`` and ``python -m tests.upstream serve DIR --port N``.
"""

from tests.upstream.build import (
    CHANNELS,
    DEFAULT_CACHE,
    REAL_PROFILE,
    UpstreamTree,
    build_upstream,
    cache_key,
    cached_upstream,
    copy_upstream,
    localize,
    real_upstream,
)
from tests.upstream.catalog import DEFAULT_EXPERIMENTAL, DEFAULT_STABLE, REAL_BASE_URL, REAL_UPSTREAM
from tests.upstream.keys import SigningKey, stop_agent
from tests.upstream.prebuilt import NVIDIA_BUILD, NVIDIA_BUILD_VERSION, Prebuilt, checked_build
from tests.upstream.server import Fault, LogRecord, UpstreamServer
from tests.upstream.signing import make_wrong_key, resign_inrelease, resign_repomd, sign_clear, sign_detached

__all__ = [
    "CHANNELS",
    "DEFAULT_CACHE",
    "DEFAULT_EXPERIMENTAL",
    "DEFAULT_STABLE",
    "NVIDIA_BUILD",
    "NVIDIA_BUILD_VERSION",
    "REAL_BASE_URL",
    "REAL_PROFILE",
    "REAL_UPSTREAM",
    "Fault",
    "LogRecord",
    "Prebuilt",
    "SigningKey",
    "UpstreamServer",
    "UpstreamTree",
    "build_upstream",
    "cache_key",
    "cached_upstream",
    "checked_build",
    "copy_upstream",
    "localize",
    "make_wrong_key",
    "real_upstream",
    "resign_inrelease",
    "resign_repomd",
    "sign_clear",
    "sign_detached",
    "stop_agent",
]
