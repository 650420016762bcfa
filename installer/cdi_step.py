"""The CDI step of ``install``: the static spec, or nvidia-cdi-refresh's, and what the node does after the run.

Toolkit 1.18+ ships refresh units that own the ``nvidia.com/gpu`` spec when they are enabled
(:mod:`configure.cdi.node`): then ``install`` writes no static spec, keeps CDI on in the engines,
and retires a static spec an older toolkit got from us. Otherwise the static spec is written as
before, unless it would be a second spec for the kind. :mod:`installer.install` calls these in
order: :func:`write_or_skip` with the other node changes, :func:`retire_static_spec` after the
engines are back (so a rollback of the run never needs the retired spec), :func:`outcome` last.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from configure.cdi.node import SOURCE_REFRESH, SpecConflict, cdi_report, static_spec_conflict
from configure.cdi.refresh import detect_refresh
from configure.journal import Journal, apply_changes
from configure.revert import revert
from installer.env import CDI_SPEC, NodeEnv
from installer.plan import InstallOptions, InstallPlan
from installer.rollback import RunLog
from plumbing.errors import ToolError


def write_or_skip(
    plan: InstallPlan, options: InstallOptions, journal: Journal, env: NodeEnv, run: RunLog
) -> Tuple[bool, str]:
    """Write the static CDI spec when the plan says so; it is planned only now, with the installed ``nvidia-ctk``.

    Enabled nvidia-cdi-refresh units own the spec (toolkit 1.18+): then nothing is written, CDI is
    on, and that is what the run reports. A static spec that would be a second one for the kind is
    skipped (refused with ``--cdi on``).
    """
    refresh = detect_refresh(options.root)
    if options.cdi == "off":
        still = (
            f"; nvidia-cdi-refresh still writes {refresh.output} ({refresh.stop_hint})"
            if refresh.active
            else ""
        )
        return False, plan.cdi_skipped + still
    if refresh.active:
        return (
            True,
            f"from nvidia-cdi-refresh, which writes {refresh.output} {refresh.when}; gpu-airgap writes no static spec",
        )
    if plan.cdi_refresh:
        return False, (
            f"skipped: the packages ship nvidia-cdi-refresh but it will not run under {options.root} ({refresh.describe()}); "
            "`gpu-airgap configure cdi` writes a static spec"
        )
    if not plan.cdi:
        return False, plan.cdi_skipped
    conflict = static_spec_conflict(options.root, CDI_SPEC)
    if conflict is not None:
        if options.cdi == "on":
            raise SpecConflict(conflict)
        return False, f"skipped: {conflict}"
    try:
        spec = env.cdi(options.root)
    except ToolError as exc:
        if options.cdi == "on":
            raise
        return False, f"skipped: {exc}"
    if spec.changed:
        run.begin()
    written = apply_changes("cdi", spec.changes, journal, dict(spec.notes))
    source = spec.facts.get("SOURCE", "nvidia-ctk")
    return True, (f"written to {CDI_SPEC} (from {source})" if written else f"{CDI_SPEC} is already current")


def retire_static_spec(options: InstallOptions, journal: Journal) -> Tuple[bool, Optional[str]]:
    """Put back what was at the static spec's place when enabled refresh units now own the spec: one spec per kind.

    Only a spec gpu-airgap wrote (``install`` or ``configure cdi`` on an older toolkit) and nobody
    edited since. Returns whether it was retired and the sentence for the run's messages.
    """
    if options.cdi == "off" or not detect_refresh(options.root).active:
        return False, None
    if not any(entry.engine == "cdi" for entry in journal.entries()):
        return False, None
    try:
        paths = revert("cdi", journal)
    except ToolError as exc:  # edited since: it is the admin's file now, verify names the duplicate
        return False, f"kept the static CDI spec gpu-airgap wrote earlier: {exc}"
    where = ", ".join(map(str, paths))
    return (
        True,
        f"removed the static CDI spec gpu-airgap wrote earlier ({where}): nvidia-cdi-refresh owns the spec now",
    )


def outcome(options: InstallOptions) -> Tuple[Dict[str, Any], str, List[str]]:
    """After the run: the node's CDI report (``--json``), its spec source, and the problems with its specs."""
    report = cdi_report(options.root)
    source = "off" if options.cdi == "off" and report.source != SOURCE_REFRESH else report.source
    return report.to_dict(), source, list(report.problems)
