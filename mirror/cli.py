"""The full ``gpu-airgap`` command line: the node-side app plus the connected-side groups.

``mirror`` and ``fleet`` are imported only when they run (like the node side's ``configure``), and
``bundle build`` imports the builder only when it runs, so no command pays for the others' imports:
a no-op ``mirror sync`` never loads the bundle writer or PyYAML.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Dict, Tuple

import typer

from installer.cli import root as node_cli
from mirror.bundle import cli as bundle_cli

#: name -> (module, attribute, help); the help is repeated so the root help needs no import (a test checks it).
CONNECTED_GROUPS: Dict[str, Tuple[str, str, str]] = {
    "mirror": ("mirror.groups", "mirror_app", "Sync NVIDIA's signed apt and yum channels to a local mirror."),
    "fleet": (
        "mirror.fleet.cli",
        "fleet_app",
        "Roll the toolkit out to many nodes: Kubernetes manifests (Ansible: deploy/ansible).",
    ),
}


def make_app() -> typer.Typer:
    """The root app with every group, connected side included."""
    bundle_app = node_cli.make_bundle_app("Build, inspect, verify, push and pull signed offline bundles.")
    bundle_cli.add_build_command(bundle_app)
    return node_cli.make_app(bundle_app=bundle_app, lazy_groups=CONNECTED_GROUPS)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (``gpu-airgap``)."""
    return node_cli.run(make_app(), argv)


def console() -> None:
    """Exit the process with :func:`main`'s code."""
    sys.exit(main())
