"""The connected host's build environment: where gpu-airgap keeps its caches, and the build time.

Shared by the bundle (node wheels, package facts, ``SOURCE_DATE_EPOCH``) and ``mirror publish``
(package facts, ``SOURCE_DATE_EPOCH``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from plumbing.errors import UsageError


def node_wheel_cache() -> Path:
    """Where built node zipapps are kept: ``$GPU_AIRGAP_WHEEL_CACHE`` or ``~/.cache/gpu-airgap/node-wheels``."""
    env = os.environ.get("GPU_AIRGAP_WHEEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gpu-airgap" / "node-wheels"


def package_info_cache() -> Path:
    """``package-info/`` beside the node wheel cache (``~/.cache/gpu-airgap/package-info``)."""
    return node_wheel_cache().parent / "package-info"


#: OpenPGP signatures (and so the bundle's) carry their time as an unsigned 32-bit number
MAX_EPOCH = 2**32 - 1


def build_epoch() -> int:
    """SOURCE_DATE_EPOCH when set (reproducible builds), else now.

    :raises UsageError: when SOURCE_DATE_EPOCH is not a non-negative integer up to :data:`MAX_EPOCH`.
    """
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if value is None:
        return int(time.time())
    if not (value.isascii() and value.isdigit()):
        raise UsageError(f"SOURCE_DATE_EPOCH={value!r} is not a number of seconds since 1970")
    if int(value) > MAX_EPOCH:
        raise UsageError(
            f"SOURCE_DATE_EPOCH={value} is after 2106-02-07, the latest time an OpenPGP signature can carry"
        )
    return int(value)
