"""``python -m tests.upstream build DIR [...]`` and ``python -m tests.upstream serve DIR --port N``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.upstream.build import build_upstream
from tests.upstream.catalog import DEFAULT_EXPERIMENTAL, DEFAULT_STABLE
from tests.upstream.server import UpstreamServer


def main(argv: Sequence[str] | None = None) -> int:
    """Build or serve a local upstream; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m tests.upstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build a local upstream into DIR (DIR/site is the web root)")
    build.add_argument("dir", type=Path)
    build.add_argument(
        "--payload-mb", type=float, default=0.0, help="pad every package with N MiB of random bytes"
    )
    build.add_argument("--extra-versions", type=int, default=0, help="add N more real stable versions")
    build.add_argument("--versions", nargs="+", default=list(DEFAULT_STABLE), help="stable deb versions")
    build.add_argument(
        "--experimental", nargs="*", default=list(DEFAULT_EXPERIMENTAL), help="experimental versions"
    )
    serve = sub.add_parser("serve", help="serve DIR (a built tree or its site/) on 127.0.0.1")
    serve.add_argument("dir", type=Path)
    serve.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "build":
        if args.dir.exists():
            parser.error(f"{args.dir} already exists; choose a new directory")
        tree = build_upstream(
            args.dir,
            payload_mb=args.payload_mb,
            extra_versions=args.extra_versions,
            stable_versions=tuple(args.versions),
            experimental_versions=tuple(args.experimental),
        )
        print(f"built {tree.root} in {tree.build_seconds:.1f} s; key {tree.key_fingerprint}")
        print(f"stable {' '.join(tree.stable_versions)}; experimental {' '.join(tree.experimental_versions)}")
        return 0
    root = args.dir / "site" if (args.dir / "site" / "gpgkey").is_file() else args.dir
    if not (root / "gpgkey").is_file():
        parser.error(f"{args.dir} is not a built upstream (no gpgkey)")
    server = UpstreamServer(root, port=args.port)
    print(f"serving {root} at {server.url}/ (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
