"""What a node does for CDI: where its ``nvidia.com/gpu`` spec comes from, and what is wrong with its specs.

The *source* of the spec, one of:

- ``nvidia-cdi-refresh``: toolkit 1.18+ refresh units are on the root and enabled
  (:mod:`configure.cdi.refresh`); the service writes its spec at boot and when the driver changes,
  so nobody else should write one;
- ``static``: no active refresh units, and a spec file for the kind exists (ours from ``configure
  cdi``, or anyone's); nothing regenerates it when the driver changes;
- ``none``: neither.

Problems (``configure verify`` and ``status`` list them): a spec a CDI registry cannot load; two
specs for the kind (:meth:`KindSpecs.duplicate_problem`), including a static spec next to active
refresh units whose spec is not written yet; a stale spec (:func:`configure.cdi.inventory.stale_reasons`);
and, on the live system with a driver loaded, active refresh units whose spec is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from configure.cdi.inventory import KindSpecs, find_specs, stale_reasons
from configure.cdi.lifecycle import driver_version
from configure.cdi.refresh import RefreshUnits, detect_refresh
from configure.cdi.spec import CDI_SPEC, KIND, SpecGenerator, plan_spec
from configure.driverroot import configured_root, detect_driver_root
from configure.engine import ConfigPlan
from configure.nodefacts import driver_present
from configure.releases import REFRESH_SERVICE_UNIT
from plumbing.errors import ExitCode, ToolError, UsageError
from plumbing.fsutil import is_live_root

SOURCE_REFRESH = "nvidia-cdi-refresh"
SOURCE_STATIC = "static"
SOURCE_NONE = "none"


class SpecConflict(ToolError):
    """Writing the static spec would leave two specs for one kind (the sentence says which and what to do)."""

    exit_code = ExitCode.CONFIG


@dataclass
class CdiReport:
    """The node's CDI spec source, its specs for the kind, and every problem with them."""

    kind: str
    source: str  #: SOURCE_REFRESH | SOURCE_STATIC | SOURCE_NONE
    summary: str  #: one sentence for people
    refresh: RefreshUnits
    specs: KindSpecs
    driver: Optional[str]  #: the loaded driver's version, when known
    driver_root: str = "/ (host)"  #: where the toolkit finds the driver (:mod:`configure.driverroot`)
    stale: Dict[str, List[str]] = field(default_factory=dict)  #: spec path -> why it is stale
    problems: List[str] = field(default_factory=list)
    passed: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """The ``--json`` form (``status``, ``configure verify``, ``install``)."""
        in_effect = {f.path for f in self.specs.in_effect}
        return {
            "kind": self.kind,
            "source": self.source,
            "summary": self.summary,
            "driver_version": self.driver,
            "driver_root": self.driver_root,
            "refresh": self.refresh.to_dict(),
            "specs": [
                {
                    "path": f.path,
                    "in_effect": f.path in in_effect,
                    "devices": list(f.devices),
                    "stale": self.stale.get(f.path, []),
                }
                for f in self.specs.files
            ],
            "invalid": {f.path: list(f.problems) for f in self.specs.invalid},
            "problems": list(self.problems),
        }


def cdi_report(root: Path, kind: str = KIND) -> CdiReport:
    """Read the refresh units and every spec for ``kind`` under ``root``; judge them (module docstring)."""
    refresh = detect_refresh(root)
    specs = find_specs(root, kind)
    source = SOURCE_REFRESH if refresh.active else SOURCE_STATIC if specs.in_effect else SOURCE_NONE
    report = CdiReport(kind, source, _summary(source, refresh, specs), refresh, specs, driver_version(root))
    driver = detect_driver_root(root)
    report.driver_root = driver.describe()
    if driver.containerized and configured_root(root) != driver.path:
        report.problems.append(
            f"the NVIDIA driver comes from the {driver.source} at {driver.path}, but the toolkit's "
            f"[nvidia-container-cli] root is {configured_root(root) or '/'}: run `gpu-airgap configure containerd`"
        )
    report.passed.append(f"CDI: {report.summary}")
    for bad in specs.invalid:
        report.problems.extend(f"{bad.path}: {p}" for p in bad.problems)
    report.problems.extend(_duplicates(refresh, specs))
    for spec in specs.files:
        report.passed.append(f"{spec.path} is a valid CDI spec")
        reasons = stale_reasons(root, spec, report.driver)
        if reasons:
            report.stale[spec.path] = reasons
            report.problems.extend(f"{spec.path} is stale: {r}" for r in reasons)
        else:
            report.passed.append(f"{spec.path}: every device node and mount it names exists")
    if (
        refresh.active
        and is_live_root(root)
        and driver_present(root)
        and refresh.output not in {f.path for f in specs.files}
    ):
        report.problems.append(
            f"nvidia-cdi-refresh is enabled and the NVIDIA driver is loaded, but {refresh.output} does not exist: "
            "the service has not run or failed (journalctl -u nvidia-cdi-refresh.service)"
        )
    return report


def static_spec_conflict(root: Path, output: str, kind: str = KIND) -> Optional[str]:
    """Why writing our static spec to ``output`` would leave two specs for ``kind``; None when it would not.

    ``configure cdi`` refuses with this sentence: with active refresh units their spec is the
    node's, and another file for the kind is someone else's spec that we do not delete.
    """
    refresh = detect_refresh(root)
    if refresh.active:
        enabled = any(u.state == "enabled" for u in refresh.units)
        stop = (
            f"mask the service first (systemctl mask {REFRESH_SERVICE_UNIT}: its udev rule starts it, enabled or not)"
            if refresh.udev_rule
            else "disable them first (systemctl disable nvidia-cdi-refresh.path nvidia-cdi-refresh.service)"
        )
        return (
            f"nvidia-cdi-refresh {'is enabled' if enabled else 'is started by its udev rule'} under {root} and "
            f"writes {refresh.output} for {kind} {refresh.when}, so a spec at {output} would be a second one for "
            f"the same devices; use the refresh units' spec, or {stop}"
        )
    others = [
        f.path for f in (*find_specs(root, kind).files, *find_specs(root, kind).invalid) if f.path != output
    ]
    if len(others) == 1:
        return (
            f"{others[0]} already defines {kind}, so a spec at {output} would be a second one for the same devices; "
            f"remove it, or replace it with `gpu-airgap configure cdi --output {others[0]} --force`"
        )
    if others:
        return f"{', '.join(others)} already define {kind}, so a spec at {output} would be one more; remove them first"
    return None


def plan_static_spec(
    root: Path,
    output: str = CDI_SPEC,
    *,
    force: bool = False,
    generator: Optional[SpecGenerator] = None,
    use_installed: bool = True,
) -> ConfigPlan:
    """:func:`configure.cdi.spec.plan_spec`, refused first when the spec would be a second one for its kind.

    :raises SpecConflict: with :func:`static_spec_conflict`'s sentence; nothing is planned then.
    """
    conflict = static_spec_conflict(root, output)
    if conflict is not None:
        raise SpecConflict(conflict)
    return plan_spec(root, output, force=force, generator=generator, use_installed=use_installed)


def plan_refresh(
    root: Path,
    output: str = CDI_SPEC,
    *,
    generator: Optional[SpecGenerator] = None,
    use_installed: bool = True,
) -> ConfigPlan:
    """Regenerate the static spec at ``output`` (``configure cdi --refresh``), stale or not; never writes.

    The new spec comes from our generator (:func:`configure.cdi.spec.plan_spec`: ``nvidia-ctk cdi
    generate`` on ``/`` when installed, with the driver root; else the device nodes), replacing the
    old one as ``--force`` would. Where nvidia-cdi-refresh owns the node's spec, its service is the
    one to run, so that is refused with the command that does it.

    :raises SpecConflict: when the refresh units or udev rule own the spec, or another spec defines the kind.
    :raises UsageError: when there is no spec at ``output`` to refresh.
    """
    report = cdi_report(root)
    if report.refresh.active:
        raise SpecConflict(
            f"nvidia-cdi-refresh owns the CDI spec here ({report.refresh.describe()}); "
            f"regenerate {report.refresh.output} with `systemctl restart {REFRESH_SERVICE_UNIT}`"
        )
    if not any(f.path == output for f in (*report.specs.files, *report.specs.invalid)):
        raise UsageError(
            f"there is no CDI spec at {output} to refresh; write one with `gpu-airgap configure cdi`"
        )
    plan = plan_static_spec(root, output, force=True, generator=generator, use_installed=use_installed)
    reasons = report.stale.get(output) or [
        p for f in report.specs.invalid if f.path == output for p in f.problems
    ]
    plan.warnings.insert(0, f"refreshing {output}: " + ("; ".join(reasons) if reasons else "it was current"))
    plan.notes["refreshed"] = output
    return plan


def _summary(source: str, refresh: RefreshUnits, specs: KindSpecs) -> str:
    if source == SOURCE_REFRESH:
        written = refresh.output in {f.path for f in specs.files}
        when = (
            ""
            if written
            else " (not written yet: it appears when the service runs with an NVIDIA driver loaded)"
        )
        return f"the spec comes from nvidia-cdi-refresh, which writes {refresh.output} at boot and when the driver changes{when}"
    if source == SOURCE_STATIC:
        paths = ", ".join(f.path for f in specs.in_effect)
        note = "; the refresh units are installed but will not run" if refresh.present else ""
        return f"the spec is {paths}, a static file that nothing regenerates when the driver changes{note}"
    note = " (the refresh units are installed but will not run)" if refresh.present else ""
    return f"no CDI spec for {specs.kind}{note}"


def _duplicates(refresh: RefreshUnits, specs: KindSpecs) -> List[str]:
    problem = specs.duplicate_problem()
    if problem is not None:
        return [problem]
    others = [f.path for f in specs.files if f.path != refresh.output]
    if refresh.active and others:
        # the refresh spec is not written yet (no driver now, or /var/run is empty until boot): it will be
        return [
            f"{', '.join(others)} and the spec nvidia-cdi-refresh writes ({refresh.output}) both define {specs.kind} "
            f"once the service runs; keep one: remove {', '.join(others)} or disable the refresh units"
        ]
    return []
