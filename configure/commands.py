"""What ``configure <engine>|report|verify|revert`` do, independent of the command line.

One implementation serves every engine: the engine plans (never writes), and this module checks
that every file can be written *before* writing any, applies the plan through
:mod:`configure.journal` (one backup per write), and reads facts back for
``report``/``verify``. Nothing here prints; :mod:`configure.cli` renders the results.

Contract with ``configure runtimeclass``: the handler it recorded
(:func:`configure.runtimeclass.read_record`) is checked against the registered runtimes; without
a record the handler is taken to be the runtime name.

Facts an engine's ``report`` returns that ``verify`` relies on: ``RUNTIME`` (the name when
registered, else empty), ``RUNTIME_PATH`` (the binary), ``DEFAULT`` (the default runtime).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from configure.cdi.node import CdiReport, cdi_report
from configure.changes import read_optional, unified_diff
from configure.crio import OCI_HOOK, hook_problems
from configure.ctk_leftovers import containerd_leftovers
from configure.distros.engine import DistroContainerdEngine
from configure.engine import ConfigPlan, Engine, RuntimeOptions, SelfChecking
from configure.engines import engine_names, get_engine
from configure.journal import Journal, apply_changes, check_can_apply
from configure.nodefacts import driver_present
from configure.revert import RevertOutcome, RevertPlan, apply_revert, kept_name, plan_revert
from configure.runtimeclass import read_record
from configure.validate import CDI_CHOICES
from plumbing.errors import ProblemsFound, ToolError, UsageError
from plumbing.fsutil import rooted
from plumbing.nodelock import node_lock

#: where a bare runtime path (docker's ``nvidia-container-runtime``) is looked for under the root
SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
#: distributions whose agent regenerates containerd's config at start
RANCHER = ("k3s", "rke2")
#: the order ``report`` prints its facts in; anything else an engine reports follows
REPORT_ORDER = (
    "CONFIG_VERSION",
    "RUNTIME",
    "RUNTIME_TYPE",
    "SYSTEMD_CGROUP",
    "HANDLER",
    "DEFAULT",
    "DEFAULT_UNCHANGED",
)


@dataclass
class ConfigureResult:
    """The outcome of one ``configure <engine>`` run."""

    plan: ConfigPlan
    dry_run: bool
    written: List[Path] = field(default_factory=list)

    @property
    def already_configured(self) -> bool:
        """True when nothing would change."""
        return not self.plan.changed

    @property
    def diff(self) -> str:
        """The unified diff of every file the plan changes."""
        return unified_diff(self.plan.changes)


def cdi_in_engine(mode: str, root: Path) -> bool:
    """Whether ``--cdi MODE`` turns CDI on in the engine: ``on``; ``off``; ``auto`` when an NVIDIA driver is under ``root``.

    The same three words as ``install --cdi``; only the default differs (configure: off).
    """
    if mode not in CDI_CHOICES:
        raise UsageError(f"--cdi must be one of {', '.join(CDI_CHOICES)}, not {mode!r}")
    return mode == "on" or (mode == "auto" and driver_present(root))


def configure_engine(engine: Engine, options: RuntimeOptions, *, dry_run: bool = False) -> ConfigureResult:
    """Plan ``engine`` for ``options`` and, unless ``dry_run``, apply it with journaled backups.

    :raises UsageError: for options no engine can use (:meth:`RuntimeOptions.validate`).
    :raises ConfigFormatError: when a file cannot be parsed or written; nothing is written then.
    """
    options.validate()
    if options.systemd_cgroup != "auto" and engine.name != "containerd":
        # Docker and CRI-O take the cgroup driver from their own settings (exec-opts, cgroup_manager), not from us.
        raise UsageError(
            f"--systemd-cgroup applies to containerd only; {engine.name} sets its cgroup driver itself, so leave it out"
        )
    if dry_run:
        return ConfigureResult(engine.plan(options), dry_run)
    with node_lock(options.root):  # read and write as one step: a run between them would be lost
        plan = engine.plan(options)
        if not plan.changed:
            return ConfigureResult(plan, dry_run)
        return ConfigureResult(plan, dry_run, write_plan(plan, options.root))


def plan_and_write(
    make_plan: Callable[[], ConfigPlan], root: Path, *, dry_run: bool
) -> Tuple[ConfigPlan, List[Path]]:
    """``make_plan()`` and, unless ``dry_run``, :func:`write_plan` it, both under the node lock.

    :raises BusyError: when another gpu-airgap process holds the node lock past the wait.
    """
    if dry_run:
        return make_plan(), []
    with node_lock(root):
        plan = make_plan()
        return plan, write_plan(plan, root)


def write_plan(plan: ConfigPlan, root: Path) -> List[Path]:
    """Check that every file of ``plan`` can be written, then write the changed ones, journaled.

    Holds the node lock (:func:`plumbing.nodelock.node_lock`; the caller that planned should
    already hold it, so that nothing changes the files between the plan and the write).

    :raises ConfigFormatError: when a file cannot be written; nothing is written then.
    """
    with node_lock(root):
        journal = Journal(root)
        check_can_apply(plan.changes, journal)
        return apply_changes(plan.engine, plan.changes, journal, plan.notes)


def engine_notes(journal: Journal, engine: str) -> Dict[str, Any]:
    """What the operator chose, from the journal: the latest notes, with the *first* previous default."""
    notes: Dict[str, Any] = {}
    first_default: Optional[Any] = None
    for entry in journal.entries():
        if entry.engine != engine:
            continue
        if first_default is None and "previous_default" in entry.notes:
            first_default = entry.notes["previous_default"]
        notes.update(entry.notes)
    if first_default is not None:
        notes["previous_default"] = first_default
    return notes


def configured_engines(journal: Journal) -> List[str]:
    """Engines gpu-airgap has changed under this root, in the order it first did."""
    names: List[str] = []
    for entry in journal.entries():
        if entry.engine not in names:
            names.append(entry.engine)
    return names


def runtimeclass_handler(root: Path) -> Optional[str]:
    """The handler of the RuntimeClass ``configure runtimeclass`` wrote, or None."""
    record = read_record(root)
    if record is None:
        return None
    return str(record["handler"]) or None


def recorded_config(notes: Dict[str, Any]) -> Optional[str]:
    """The main config (node path) the last configure run edited, from its journal notes; None for the default."""
    config = notes.get("config")
    return str(config) if config else None


def engine_for(name: str, distro: Optional[str] = None) -> Engine:
    """The engine ``name``; for containerd, the one of ``distro`` (``--distro``) when given."""
    if name == "containerd" and distro is not None:
        return DistroContainerdEngine(distro)
    return get_engine(name)


def report(
    engine: Engine, root: Path, runtime_name: Optional[str] = None, config: Optional[str] = None
) -> Dict[str, str]:
    """Facts about the runtime, read back from the files on disk, in ``REPORT_ORDER``.

    :param config: the main config to read (node path); by default the one the last
        ``configure <engine>`` run under ``root`` edited (its ``--config``), else the engine's default.
    """
    notes = engine_notes(Journal(root), engine.name)
    name = runtime_name or str(notes.get("runtime_name", "nvidia"))
    facts = dict(engine.report(root, name, config or recorded_config(notes)))
    if isinstance(engine, SelfChecking):  # no runtime entry: no handler, no default runtime
        return facts
    facts["HANDLER"] = runtimeclass_handler(root) or name
    previous = notes.get("previous_default")
    facts["DEFAULT_UNCHANGED"] = str(previous is None or facts.get("DEFAULT") == previous).lower()
    ordered = {key: facts[key] for key in REPORT_ORDER if key in facts}
    ordered.update((key, value) for key, value in facts.items() if key not in ordered)
    return ordered


def verify_engines(root: Path, engines: Optional[Sequence[str]] = None) -> List[str]:
    """The engines ``verify`` checks: those named, else those configure changed, else containerd."""
    recorded = [name for name in configured_engines(Journal(root)) if name in engine_names()]
    return list(engines or recorded or ["containerd"])


def verify(
    root: Path,
    engines: Optional[Sequence[str]] = None,
    distro: Optional[str] = None,
    cdi: Optional[CdiReport] = None,
) -> List[str]:
    """Check what the node will actually use; return the checks that passed.

    :param cdi: the node's :func:`~configure.cdi.node.cdi_report` when the caller has it already.

    :raises ProblemsFound: listing every problem found (handler, binary, default, CDI spec).
    """
    journal = Journal(root)
    names = verify_engines(root, engines)
    handler = runtimeclass_handler(root)
    passed: List[str] = []
    problems: List[str] = []
    for name in names:
        notes = engine_notes(journal, name)
        engine = engine_for(name, distro or (str(notes["distro"]) if notes.get("distro") else None))
        runtime = str(notes.get("runtime_name", "nvidia"))
        config = recorded_config(notes)
        if isinstance(engine, SelfChecking):
            ok, wrong = engine.check(root, notes)
            passed.extend(ok)
            problems.extend(wrong)
            continue
        if notes.get("mode") == "hook":
            problems.extend(_hook_problems(root, name, str(notes.get("hook_path", "")), passed))
            continue
        facts = engine.report(root, runtime, config)
        problems.extend(f"{name}: {p}" for p in facts.get("TEMPLATE_PROBLEMS", "").split("; ") if p)
        if name == "containerd" and facts.get("DISTRO", "containerd") == "containerd":
            problems.extend(f"{name}: {p}" for p in containerd_leftovers(root, config, runtime))
        if not facts.get("RUNTIME"):
            restart = (
                f" ({facts['RESTART']} so {facts['DISTRO']} regenerates its config)"
                if facts.get("DISTRO") in RANCHER
                else ""
            )
            problems.append(f"{name}: the runtime {runtime!r} is not registered{restart}")
            continue
        passed.append(f"{name}: runtime {runtime} is registered")
        wanted = handler or runtime
        if wanted != runtime and not engine.report(root, wanted, config).get("RUNTIME"):
            problems.append(f"{name}: the RuntimeClass handler {wanted!r} is not a registered runtime")
        else:
            passed.append(f"{name}: RuntimeClass handler {wanted} matches a registered runtime")
        binary = facts.get("RUNTIME_PATH", "")
        if binary and _binary_exists(root, binary):
            passed.append(f"{name}: {binary} exists")
        else:
            problems.append(f"{name}: the runtime binary {binary or '(none)'} does not exist under {root}")
        if "set_as_default" in notes:
            expected = runtime if notes["set_as_default"] else str(notes.get("previous_default", "runc"))
            if facts.get("DEFAULT") != expected:
                problems.append(
                    f"{name}: the default runtime is {facts.get('DEFAULT')!r}, but the operator chose {expected!r}"
                )
            else:
                passed.append(f"{name}: the default runtime is {expected}, as chosen")
    problems.extend(_cdi_problems(cdi or cdi_report(root), passed))
    if problems:
        raise ProblemsFound(f"{len(problems)} configuration problem(s) found", problems)
    return passed


@dataclass
class RevertResult:
    """What ``configure revert`` did (or, with ``--dry-run``, would do)."""

    plan: RevertPlan
    dry_run: bool
    outcome: RevertOutcome

    def to_dict(self) -> Dict[str, Any]:
        """The ``--json`` object."""
        return {
            "dry_run": self.dry_run,
            "engines": self.plan.engines,
            "restored": [str(r.path) for r in self.plan.restores if r.action == "restore"],
            "deleted": [str(r.path) for r in self.plan.restores if r.action == "delete"],
            "kept": self.outcome.kept,
        }


def revert_engines(
    root: Path, engines: Optional[Sequence[str]] = None, *, force: bool = False, dry_run: bool = False
) -> RevertResult:
    """Restore every file the given engines' configure runs changed (all recorded engines by default).

    Everything is checked before anything changes: each engine asked about has something to revert,
    every backup is there, and no file was edited since (unless ``force``).

    :raises ToolError: naming the engine with nothing to revert (nothing changed).
    :raises ProblemsFound: listing every file edited since, unless ``force`` (nothing changed).
    """
    with contextlib.nullcontext() if dry_run else node_lock(root):
        journal = Journal(root)
        names = list(dict.fromkeys(engines or configured_engines(journal)))
        if not names:
            raise ToolError(f"nothing to revert: gpu-airgap has not changed any configuration under {root}")
        plan = plan_revert(journal, names)
        if plan.problems and not force:
            raise ProblemsFound("refusing to revert", plan.problems)
        if dry_run:
            kept = {
                str(r.path): str(kept_name(r.path, r.edited)) for r in plan.restores if r.edited is not None
            }
            return RevertResult(plan, True, RevertOutcome(kept=kept))
        return RevertResult(plan, False, apply_revert(journal, plan, force=force))


def _binary_exists(root: Path, binary: str) -> bool:
    candidates = [binary] if binary.startswith("/") else [f"{d}/{binary}" for d in SEARCH_PATH]
    return any(rooted(root, c).is_file() for c in candidates)


def _hook_problems(root: Path, engine: str, hook_path: str, passed: List[str]) -> List[str]:
    """Problems with the OCI hook ``configure crio --hook`` wrote (CRI-O without a runtime entry, podman)."""
    raw = read_optional(rooted(root, OCI_HOOK))
    if raw is None:
        return [f"{engine}: the OCI hook {OCI_HOOK} does not exist"]
    problems = [f"{engine}: {OCI_HOOK}: {p}" for p in hook_problems(raw)]
    if not problems:
        passed.append(f"{engine}: the OCI hook {OCI_HOOK} is valid")
    if hook_path and _binary_exists(root, hook_path):
        passed.append(f"{engine}: {hook_path} exists")
    else:
        problems.append(f"{engine}: the hook binary {hook_path or '(none)'} does not exist under {root}")
    return problems


def _cdi_problems(report: CdiReport, passed: List[str]) -> List[str]:
    """Problems with the CDI specs for nvidia.com/gpu: invalid, duplicate, stale (:mod:`configure.cdi.node`)."""
    passed.extend(report.passed)
    return report.problems
