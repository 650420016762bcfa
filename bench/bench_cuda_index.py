"""Benchmark: reading the toolkit's chain out of a CUDA-sized Packages index.

A CUDA download repository's Packages lists thousands of packages; ``mirror sync --upstream cuda:…``
reads only the toolkit's (:data:`mirror.sync.cuda.TOOLKIT_CHAIN`), skipping the others by their
``Package:`` line. Printed: seconds for that, for python-debian alone parsing every paragraph of the
same text (the baseline), for our full parse (every paragraph into records), and the ratios.

Run: ``.venv/bin/python bench/bench_cuda_index.py [STANZAS]`` (default 5000; well under a minute).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debian import deb822  # noqa: E402

from mirror.index.apt import iter_packages  # noqa: E402
from mirror.sync.cuda import TOOLKIT_CHAIN  # noqa: E402
from tests.upstream.cuda import synthetic_stanzas  # noqa: E402

TOOLKIT = [
    f"Package: {name}\nArchitecture: amd64\nVersion: 1.17.{v}-1\nFilename: ./{name}_1.17.{v}-1_amd64.deb\n"
    f"Size: 1000\nSHA256: {'a' * 64}\nSHA512: {'b' * 128}\nDescription: toolkit\n"
    for name in sorted(TOOLKIT_CHAIN)
    for v in range(8)
]


def _best(run: Callable[[], object], rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(stanzas: int) -> None:
    """Print the three timings and the ratios for an index of ``stanzas`` synthetic paragraphs plus the chain."""
    lines = "\n".join(synthetic_stanzas(stanzas) + TOOLKIT).splitlines(keepends=True)
    ours = _best(lambda: list(iter_packages(lines, names=TOOLKIT_CHAIN)))
    debian = _best(lambda: list(deb822.Packages.iter_paragraphs(iter(lines), use_apt_pkg=False)))
    full = _best(lambda: list(iter_packages(lines)))
    print(f"{stanzas + len(TOOLKIT)} paragraphs, {sum(map(len, lines)) / 1e6:.1f} MB")
    print(f"toolkit chain only (sync --upstream cuda:): {ours * 1000:.1f} ms")
    print(f"python-debian alone, every paragraph:      {debian * 1000:.1f} ms")
    print(f"gpu-airgap, every paragraph into records:   {full * 1000:.1f} ms")
    print(
        f"ratio chain-only / python-debian: {ours / debian:.2f}; every paragraph / python-debian: {full / debian:.2f}"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
