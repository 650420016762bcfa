"""The ``gpu-airgap mirror`` group: the sync wing's commands plus the publish wing's ``publish``.

It is the one place both wings meet, above them: :mod:`mirror.cli` imports it only when the group
runs, so other commands start without either wing.
"""

from __future__ import annotations

import typer

from mirror.publish.cli import add_publish_command
from mirror.snapshot_cli import snapshot_app
from mirror.sync.archive_cli import add_import_command
from mirror.sync.cli import add_sync_commands
from mirror.sync.list_cli import add_list_command
from plumbing.clikit import Group

mirror_app = typer.Typer(
    cls=Group, help="Sync NVIDIA's signed apt and yum channels to a local mirror.", no_args_is_help=True
)
add_sync_commands(mirror_app)
add_list_command(mirror_app)
add_import_command(mirror_app)
add_publish_command(mirror_app)
mirror_app.add_typer(snapshot_app, name="snapshot")
