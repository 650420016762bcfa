"""A later wall clock without waiting for it: for tests that prove the clock does not leak into bytes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def clock_moved_on(seconds: float = 86400) -> Iterator[None]:
    """Inside the block, ``time.time()`` and ``time.time_ns()`` read ``seconds`` later than the real clock.

    Subprocesses (gpg, createrepo_c) keep the real clock: what they stamp must come from the epoch
    they are given, which the tests check separately.
    """
    real, real_ns = time.time, time.time_ns
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: real() + seconds)
        patch.setattr(time, "time_ns", lambda: real_ns() + int(seconds * 10**9))
        yield
