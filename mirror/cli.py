"""The full ``gpu-airgap`` command line: the node-side app plus the ``mirror`` group and ``bundle build``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from installer import cli as node_cli

mirror_app = typer.Typer(
    help="Sync NVIDIA's signed apt and yum channels to a local mirror.", no_args_is_help=True
)


def make_app() -> typer.Typer:
    """The root app with every group, connected side included."""
    bundle_app = node_cli.make_bundle_app()
    return node_cli.make_app(bundle_app=bundle_app, groups={"mirror": mirror_app})


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (``gpu-airgap``)."""
    return node_cli.run(make_app(), argv)


def console() -> None:
    """Exit the process with :func:`main`'s code."""
    sys.exit(main())
