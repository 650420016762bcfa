"""The one place a retry waits: :func:`backoff`.

The mirror's HTTP client and the node's registry client wait here between attempts (unless a
caller passes its own ``sleep``). Tests swap this function for a recorder (``tests/conftest.py``),
so no test spends real time on a back-off and each can assert the waits it caused.
"""

from __future__ import annotations

import time


def backoff(seconds: float) -> None:
    """Wait ``seconds`` before the next attempt."""
    time.sleep(seconds)
