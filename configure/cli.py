"""``gpu-airgap configure ...``: a thin typer layer over the configure library.

Each command builds objects, calls the library and renders the result; it makes no decisions.
Signatures use ``typing.Optional``/``List`` because typer evaluates annotations at runtime and
this module must import on python3.9.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Register the NVIDIA runtime with containerd, Docker or CRI-O; write CDI specs and RuntimeClasses.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

from configure.cli_extras import register_extras  # noqa: E402  (toolkit, cdi, runtimeclass)

register_extras(app)
