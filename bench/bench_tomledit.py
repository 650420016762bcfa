"""Benchmark `configure containerd` on a big config.toml (issue 24, item 17: target <= 5 s and <= 200 MB at 50 MB).

Writes the default containerd 1.6 config grown to ``--size-mb`` in one of two shapes, then runs
``configure containerd`` on it in a fresh child process (peak RSS from
``resource.getrusage(RUSAGE_CHILDREN)``) and, in the same run as the baseline, Python's own
``tomllib.loads`` of the same file (in a child too). It prints both and their ratio.

Shapes:

- ``comments``: the config followed by comment lines (how a config gets padded to 50 MB);
- ``mirrors``: registry mirror tables appended at the end, split off from their parent table and
  indented, each with two comment lines: every line is content tomlkit must model, so expect about
  a second per MB (linear; it was quadratic before item 17).

Usage: python bench/bench_tomledit.py [--size-mb 50] [--shape comments|mirrors]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests/data/fixtures/containerd/config-1.6-default.toml"
COMMENT = "# padding: a comment line about the node's configuration, {i}\n"
MIRROR = (
    '\n  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry-{i}.example.com"]\n'
    '    endpoint = ["https://mirror-{i}.example.com"]\n'
    "  # mirror {i}: the site's own copy\n"
    "  # (kept in sync nightly)\n"
)

#: each measurement runs in its own interpreter; it prints {"seconds": ..., "peak_mb": ...}
CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
path, what = sys.argv[2], sys.argv[3]
if what == "configure":
    from pathlib import Path
    from configure.commands import configure_engine
    from configure.engine import RuntimeOptions
    from tests.containerd_helpers import engine
    started = time.perf_counter()
    configure_engine(engine(), RuntimeOptions(root=Path(path)))
else:
    import tomllib
    started = time.perf_counter()
    with open(path + "/etc/containerd/config.toml", "rb") as handle:
        tomllib.load(handle)
print(json.dumps({"seconds": time.perf_counter() - started}))
"""


def make_config(root: Path, size_mb: float, shape: str) -> int:
    """Write ROOT/etc/containerd/config.toml of about ``size_mb`` MB; return its size in bytes."""
    target = int(size_mb * 1024 * 1024)
    path = root / "etc/containerd/config.toml"
    path.parent.mkdir(parents=True)
    template = COMMENT if shape == "comments" else MIRROR
    with path.open("w") as out:
        size = out.write(FIXTURE.read_text())
        i = 0
        while size < target:
            size += out.write(template.format(i=i))
            i += 1
    return size


def measure(root: Path, what: str) -> dict[str, float]:
    """Seconds (inside the child) and the child's peak RSS in MB."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, subprocess, sys, json\n"
            "out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout\n"
            "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
            "print(json.dumps({**json.loads(out), 'peak_mb': peak}))",
            sys.executable,
            "-c",
            CHILD,
            str(ROOT),
            str(root),
            what,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, default=50)
    parser.add_argument("--shape", choices=("comments", "mirrors"), default="comments")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        size = make_config(Path(scratch), args.size_mb, args.shape)
        baseline = measure(Path(scratch), "tomllib")
        ours = measure(Path(scratch), "configure")
    print(f"config.toml: {size / 1e6:.1f} MB ({args.shape})")
    print(f"tomllib.load (baseline): {baseline['seconds']:.2f} s, peak RSS {baseline['peak_mb']:.0f} MB")
    print(f"configure containerd:    {ours['seconds']:.2f} s, peak RSS {ours['peak_mb']:.0f} MB")
    print(
        f"ratio: {ours['seconds'] / baseline['seconds']:.1f}x tomllib (targets: <= 5 s and <= 200 MB at 50 MB)"
    )


if __name__ == "__main__":
    main()
