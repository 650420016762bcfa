"""``gpu-airgap uninstall``, ``status`` and ``restart``: undo the recorded install, report on it, finish it.

Both read ``state.json`` (:mod:`installer.state`) and the configure journal; uninstall restores
files with :func:`configure.revert.apply_revert`, so the bytes come back exactly as they were.
Uninstall checks everything before it changes anything (drift, every backup, the packages present),
and ``--dry-run`` stops there and says what it would do. A record of an install that did not finish
(killed, or an upgrade that could not be undone) is reported by ``status`` and undone by ``uninstall``.
Uninstall marks the record before its first change and the journal records each file it put back,
so an uninstall killed at any point is finished by running it again.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from configure import package_origins
from configure.cdi.node import cdi_report
from configure.changes import read_optional
from configure.commands import engine_for
from configure.ctk_leftovers import containerd_leftovers
from configure.journal import Journal
from configure.revert import RevertPlan, apply_revert, kept_name, plan_revert
from configure.validate import existing_root
from installer import purge as purge_lib
from installer.env import CDI_SPEC, SERVICE_UNITS, NodeEnv, engine_unit
from installer.install import InstallResult, restart_engines
from installer.plan import InstallOptions
from installer.state import (
    ChangedFile,
    NodeState,
    changed_files,
    host_path,
    load_state,
    save_state,
    state_path,
)
from installer.target import TOOLKIT_ORDER
from installer.workspace import locked_state_dir
from plumbing.errors import ProblemsFound, ToolError, UsageError
from plumbing.fsutil import is_live_root, rooted


@dataclass
class UninstallResult:
    """What uninstall restored and removed (with ``dry_run``: would restore and remove)."""

    restored: List[str] = field(default_factory=list)  #: every file put back, the deleted ones included
    removed: List[str] = field(default_factory=list)
    messages: List[str] = field(default_factory=list)
    failed_engines: List[str] = field(default_factory=list)  #: engines not running after the restore
    deleted: List[str] = field(default_factory=list)  #: of ``restored``, the files the install had created
    kept: Dict[str, str] = field(default_factory=dict)  #: edited file -> the copy of the edit (``--force``)
    dry_run: bool = False

    def to_dict(self) -> Dict[str, Any]:
        """The ``--json`` object."""
        return dict(self.__dict__)


class EngineNotRunning(ToolError):
    """An engine was not running after uninstall put its previous configuration back."""

    def __init__(self, engines: List[str]) -> None:
        self.engines = engines
        super().__init__(
            f"{', '.join(engines)} did not come back after its previous configuration was restored; "
            "the files are the ones from before the install, see `systemctl status` for why it stopped"
        )


def file_drift(root: Path, state: NodeState) -> List[str]:
    """Every recorded configuration file someone changed after gpu-airgap wrote it."""
    problems = []
    for item in state.files:
        path = host_path(root, item)
        current = read_optional(path)
        if current is None:
            problems.append(f"{path} was deleted after gpu-airgap wrote it")
        elif hashlib.sha256(current).hexdigest() != item.sha256:
            problems.append(f"{path} was edited after gpu-airgap wrote it")
    return problems


def _load(root: Path) -> Optional[NodeState]:
    """The install record, its files brought up to date from the configure journal.

    An unfinished record gets its files from the journal (it was written before them). A complete
    one takes the later ``configure`` runs on its engines as recorded changes, not drift: each file
    expects the bytes the journal last wrote, and files written since join the record, so
    ``uninstall`` reverts them too.
    """
    state = load_state(root)
    if state is not None:
        journal_view = changed_files(Journal(root), state.engines)
        state.files = journal_view if not state.complete else later_writes(state.files, journal_view)
    return state


def later_writes(recorded: List[ChangedFile], journal_view: List[ChangedFile]) -> List[ChangedFile]:
    """``recorded`` with the journal's last digest of each file, plus the files only the journal has.

    A file the journal no longer has (``configure revert`` forgot it) keeps its recorded digest.
    """
    files = {item.path: item for item in recorded}
    for item in journal_view:
        if item.path in files:
            files[item.path].sha256 = item.sha256
        else:
            files[item.path] = item
    return list(files.values())


def _require_state(root: Path) -> NodeState:
    state = _load(root)
    if state is None:
        raise ToolError(f"nothing to uninstall: gpu-airgap has no install recorded under {root}")
    return state


def uninstall(
    root: Path,
    env: NodeEnv,
    *,
    keep_packages: bool = False,
    force: bool = False,
    dry_run: bool = False,
    purge: bool = False,
) -> UninstallResult:
    """Restore every configuration file the install changed, then remove its packages in reverse order.

    :param keep_packages: restore the configuration only.
    :param force: restore files even if they were edited since (each edit is kept as ``FILE.gpu-airgap-old``).
    :param dry_run: decide and report everything, change nothing.
    :param purge: leave no config files either (:mod:`installer.purge`); with no install recorded, purge
        what an earlier uninstall left.
    :raises ProblemsFound: when recorded files were edited since, unless ``force`` (nothing changed).
    """
    existing_root(root)
    if purge and keep_packages:
        raise UsageError("--purge and --keep-packages contradict each other; pass one of them")
    result = UninstallResult(dry_run=dry_run)
    with locked_state_dir(root):
        state = _load(root) if purge else _require_state(root)
        if state is None:
            return _purge_leftovers(root, env, result)
        journal = Journal(root)
        recorded = {entry.engine for entry in journal.entries()}
        engines = [engine for engine in state.engines if engine in recorded]
        plan = plan_revert(journal, engines) if engines else RevertPlan([], [])
        # after a killed uninstall the journal knows which files it put back already; the record does not
        drift = plan.problems if state.uninstalling else file_drift(root, state)
        if drift and not force:
            raise ProblemsFound(
                "refusing to uninstall (use --force to restore the recorded files anyway)", drift
            )
        backend = env.backend(env.detect(root)) if not keep_packages else None
        removal = (
            purge_lib.plan_removal(backend, root, list(reversed(list(state.packages))), purge=purge)
            if backend is not None
            else None
        )
        names = removal.names if removal is not None else []
        result.restored = [str(r.path) for r in plan.restores]
        result.deleted = [str(r.path) for r in plan.restores if r.action == "delete"]
        result.removed = names
        _explain(state, result, keep_packages)
        if dry_run:
            result.messages += purge_lib.describe(removal) if removal is not None else []
            result.kept = {
                str(r.path): str(kept_name(r.path, r.edited)) for r in plan.restores if r.edited is not None
            }
            return result
        if not state.uninstalling:
            state.uninstalling = True
            save_state(root, state)
        result.kept = apply_revert(journal, plan, force=force).kept
        if backend is not None and removal is not None:
            if state.held:
                backend.unhold(names)
            result.messages += purge_lib.remove(backend, removal)
        # After the packages are gone: k3s/RKE2 register whatever runtime binary they find at start.
        if is_live_root(root):
            for engine in state.engines:
                unit = (
                    engine_unit(env.services, engine, root, state.distro) if engine in SERVICE_UNITS else ""
                )
                # an engine the admin stopped stays stopped: it reads the restored file when started
                if unit and not env.services.is_stopped(unit):
                    env.services.restart(unit)
                    if not env.services.is_active(unit):
                        result.failed_engines.append(engine)
        state_path(root).unlink()
    return result


def _purge_leftovers(root: Path, env: NodeEnv, result: UninstallResult) -> UninstallResult:
    """``uninstall --purge`` after an uninstall without it: the config files and generated files it left."""
    backend = env.backend(env.detect(root))
    removal = purge_lib.plan_leftovers(backend, root, list(reversed(TOOLKIT_ORDER)))
    result.messages = purge_lib.describe(removal) if result.dry_run else purge_lib.remove(backend, removal)
    return result


def _explain(state: NodeState, result: UninstallResult, keep_packages: bool) -> None:
    if keep_packages:
        result.messages.append("kept the packages (--keep-packages)")
    older = {n: v for n, v in state.previous.items() if v is not None and n in result.removed}
    if older:
        result.messages.append(
            "before the install the node had "
            + ", ".join(f"{n} {v}" for n, v in older.items())
            + "; those versions are not in the bundle, reinstall them from their own media if needed"
        )
    if state.removed:
        result.messages.append(
            "the install had removed "
            + ", ".join(f"{n} {v}" for n, v in state.removed.items())
            + "; reinstall them if you still need them"
        )


def restart_pending(
    root: Path, env: NodeEnv, engines: Optional[List[str]] = None, distro: Optional[str] = None
) -> InstallResult:
    """Restart the engines the recorded install changed but did not restart (``install --no-restart``).

    What ``install`` does after registering the runtime, run later (an Ansible handler, the
    Kubernetes pod): an engine that does not come back gets its previous configuration back (from
    the configure journal) and is restarted again, and drops out of the record. The pending list
    is cleared either way.

    :param engines: restart these instead (after ``configure ENGINE``, which records no install).
    :raises UsageError: under another ``--root``: its engines are not ours to restart.
    """
    if not is_live_root(root):
        raise UsageError(
            f"engines are restarted only on the running system; {root} is another root, restart them there"
        )
    with locked_state_dir(root):
        state = load_state(root)
        result = InstallResult(
            outcome="restarted",
            node="",
            target=state.target if state else "",
            bundle_id=state.bundle_id if state else "",
        )
        due = sorted(set(engines)) if engines else list(state.restart_pending if state else [])
        unknown = [name for name in due if name not in SERVICE_UNITS]
        if unknown:
            raise UsageError(
                f"cannot restart {', '.join(unknown)}: the engines are {', '.join(SERVICE_UNITS)}"
            )
        if not due:
            result.outcome = "nothing to restart"
            return result
        journal = Journal(root)
        result.engines = {name: "configuration changed" for name in due}
        restart_engines(due, InstallOptions(root=root, distro=_distro(distro, state)), journal, env, result)
        if state is not None:
            state.engines = [e for e in state.engines if e not in result.failed_engines]
            state.files = changed_files(journal, state.engines)
            state.restart_pending = [e for e in state.restart_pending if e not in due]
            save_state(root, state)
        result.changed = True
    return result


def _distro(given: Optional[str], state: Optional[NodeState]) -> Optional[str]:
    """The containerd to act on: ``--distro`` when given, else the one the recorded install chose (None: detect)."""
    return given or (state.distro if state else None)


def status(
    root: Path, env: NodeEnv, runtime_name: str = "nvidia", distro: Optional[str] = None
) -> Dict[str, Any]:
    """Report packages, engine registration, the CDI spec and drift from ``state.json``.

    The returned dict has ``problems`` (a list): empty means the node matches its record.
    """
    facts = env.detect(root)
    state = _load(root)
    unfinished = state.unfinished() if state is not None else None
    problems: List[str] = [unfinished] if unfinished else []
    packages: Dict[str, Any] = {}
    try:
        backend = env.backend(facts)
        names = list(state.packages) if state else list(TOOLKIT_ORDER)
        packages = backend.installed_versions(names)
    except ToolError as exc:
        problems.append(str(exc))
    # which repository each package came from, when dnf's history or apt's lists know (issue 26 item 5)
    origins = package_origins.package_origins(
        root, packages, facts.package_format, state.packages if state else {}
    )
    name = state.runtime_name if state else runtime_name
    chosen = _distro(distro, state)
    engines: Dict[str, Any] = {}
    for engine_name in env.engine_names:
        if engine_name not in facts.engines and not (state and engine_name in state.engines):
            continue
        try:
            engine = engine_for(engine_name, chosen) if chosen else env.engine(engine_name)
            engines[engine_name] = engine.report(root, name)
            if (
                engine_name == "containerd"
                and engines[engine_name].get("DISTRO", "containerd") == "containerd"
            ):
                problems.extend(f"containerd: {p}" for p in containerd_leftovers(root, runtime_name=name))
        except ToolError as exc:
            engines[engine_name] = {"error": str(exc)}
    # the static spec's own fields, then where the node's spec comes from and what is wrong with the specs
    report = cdi_report(root)
    cdi: Dict[str, Any] = {"path": CDI_SPEC, "present": rooted(root, CDI_SPEC).is_file()}
    cdi["valid"] = cdi["present"] and not any(bad.path == CDI_SPEC for bad in report.specs.invalid)
    cdi.update(report.to_dict())
    problems.extend(report.problems)
    if state is not None:
        for pkg, version in state.packages.items():
            now = packages.get(pkg)
            if now != version:
                problems.append(f"{pkg} is {now or 'not installed'}, the install recorded {version}")
        if not state.uninstalling:
            problems.extend(file_drift(root, state))
    return {
        "root": str(root),
        "node": facts.describe(),
        "system": asdict(facts.system),
        "installed_by_gpu_airgap": state is not None,
        "bundle_id": state.bundle_id if state else None,
        "signer": state.signer if state else None,
        "release": state.release if state else None,
        "channel": state.channel if state else None,
        "release_candidate": bool(state and state.channel == "experimental"),
        "built": (state.built or None) if state else None,
        "held": state.held if state else False,
        "restart_pending": state.restart_pending if state else [],
        "packages": packages,
        "origins": origins,
        "engines": engines,
        #: who manages the runtime's registration when it is not gpu-airgap or the admin (the GPU Operator)
        "owner": next((f["OWNER"] for f in engines.values() if f.get("OWNER")), None),
        "cdi": cdi,
        "problems": problems,
    }
