"""``gpu-airgap install``: verify, detect, preflight, install, hold, register, CDI, restart, record.

The order is the contract (issue 6): nothing under the root changes until the bundle is verified
completely, the node matches a target and preflight found no problem. Collaborators come in
through :class:`~installer.env.NodeEnv`; this module decides, they act.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from configure.changes import Journal, apply_changes, revert, unified_diff
from configure.engine import RuntimeOptions
from configure.nodefacts import NodeFacts
from installer import preflight
from installer.backend import PackageBackend
from installer.env import CDI_SPEC, SERVICE_UNITS, NodeEnv
from installer.state import STATE_DIR, NodeState, changed_files, load_state, save_state
from installer.target import StagedTarget, install_order, pick_target
from plumbing.errors import BusyError, CommandError, ToolError, UsageError
from plumbing.fsutil import is_live_root, rooted

RUNTIME_CHOICES = ("auto", "containerd", "docker", "crio", "none")
CDI_CHOICES = ("auto", "on", "off")


@dataclass(frozen=True)
class InstallOptions:
    """The install command's flags."""

    root: Path = Path("/")
    runtime: str = "auto"
    runtime_name: str = "nvidia"
    set_as_default: bool = False
    cdi: str = "auto"
    hold: bool = False
    allow_downgrade: bool = False
    no_restart: bool = False
    dry_run: bool = False

    def validate(self) -> None:
        """:raises UsageError: for values the command cannot use."""
        if self.runtime not in RUNTIME_CHOICES:
            raise UsageError(f"--runtime must be one of {', '.join(RUNTIME_CHOICES)}, not {self.runtime!r}")
        if self.cdi not in CDI_CHOICES:
            raise UsageError(f"--cdi must be one of {', '.join(CDI_CHOICES)}, not {self.cdi!r}")
        if not self.runtime_name or not self.runtime_name.replace("-", "").replace("_", "").isalnum():
            raise UsageError(f"--runtime-name {self.runtime_name!r} must be letters, digits, '-' or '_'")


@dataclass
class InstallResult:
    """What install did (or, with ``--dry-run``, would do); rendered by the CLI."""

    outcome: str  #: "installed", "up-to-date" or "dry-run"
    node: str
    target: str
    bundle_id: str
    packages: Dict[str, str] = field(default_factory=dict)  #: name -> version now (or planned)
    messages: List[str] = field(default_factory=list)
    engines: Dict[str, str] = field(default_factory=dict)  #: engine -> what happened
    cdi: str = ""
    diff: str = ""  #: configuration diff (dry-run)
    failed_engines: List[str] = field(default_factory=list)  #: engines that did not come back; config restored
    #: engines still to restart (``--no-restart``, or under another root): ``gpu-airgap restart`` does it
    restart_pending: List[str] = field(default_factory=list)
    #: whether the node changed (dry-run: would change); what automation such as Ansible reports
    changed: bool = False

    def to_dict(self) -> Dict[str, Any]:
        """The ``--json`` object."""
        return dict(self.__dict__)


class InstallFailed(ToolError):
    """dpkg or rpm failed part-way; the message says what was undone and the state of every package."""


class EngineRestartFailed(ToolError):
    """An engine did not come back with the new runtime; its previous configuration was put back."""

    def __init__(self, engines: Sequence[str]) -> None:
        self.engines = list(engines)
        super().__init__(
            f"{', '.join(self.engines)} did not come back after registering the runtime, so the previous "
            "configuration was restored; the packages stay installed (see `gpu-airgap status`)"
        )


@contextlib.contextmanager
def node_lock(root: Path) -> Iterator[Path]:
    """Hold the per-root lock on the state directory; remove the directories we created if they stay empty.

    :raises BusyError: when another gpu-airgap process holds it.
    """
    state_dir = rooted(root, STATE_DIR)
    created: List[Path] = []
    probe = state_dir
    while not probe.exists():
        created.append(probe)
        probe = probe.parent
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir, os.O_RDONLY)
    try:
        try:
            # distinct bits, so + is |; vermin's union-types check misreads a | between attributes
            fcntl.flock(fd, fcntl.LOCK_EX + fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise BusyError(f"another gpu-airgap process is working on {root}; try again when it finishes") from exc
        yield state_dir
    finally:
        os.close(fd)
        for directory in created:  # deepest first: leave the root exactly as we found it
            with contextlib.suppress(OSError):
                directory.rmdir()


@contextlib.contextmanager
def staging(state_dir: Path) -> Iterator[Path]:
    """A private (0700) staging directory, always removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="staging-", dir=state_dir))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def install(bundle: Path, keyring: Path, options: InstallOptions, env: NodeEnv) -> InstallResult:
    """Install the toolkit from ``bundle`` onto the node under ``options.root``.

    :raises VerificationError: the bundle or its signature is bad (nothing changed).
    :raises TargetMismatch: the bundle has nothing for this node (nothing changed).
    :raises PreflightFailed: listing every problem (nothing changed).
    :raises InstallFailed: the package manager failed; the message gives the state of each package.
    """
    options.validate()
    root = options.root
    if not bundle.is_file():
        raise UsageError(f"the bundle {bundle} does not exist")
    if not keyring.is_file():
        raise UsageError(f"the operator key {keyring} does not exist")
    if not root.is_dir():
        raise UsageError(f"the root {root} is not a directory")
    with node_lock(root) as state_dir, staging(state_dir) as stage:
        _say(env, f"verifying {bundle.name} with {keyring}")
        staged = env.opener(bundle, keyring, stage)
        old_state = load_state(root)  # a damaged record must stop us before anything changes
        facts = env.detect(root)
        target = pick_target(staged, facts.package_format, facts.arch, (facts.os.id, *facts.os.id_like))
        backend = env.backend(facts)
        installed = {name: backend.installed_version(name) for name in preflight.names_to_query(target)}
        check = _preflight(target, facts, backend, installed, options, env)
        engines = _engines_for(options.runtime, facts)
        result = InstallResult(
            outcome="dry-run" if options.dry_run else "installed",
            node=facts.describe(),
            target=target.describe(),
            bundle_id=staged.bundle_id,
            packages={p.name: p.version for p in target.packages},
        )
        result.messages.extend(check.notes)
        hold_now = options.hold and not (old_state and old_state.held and not check.to_install)
        pending_before = list(old_state.restart_pending) if old_state else []
        if options.dry_run:
            recorded = old_state is not None and old_state.bundle_id == staged.bundle_id
            return _dry_run(result, check, target, engines, facts, options, env, hold_now, recorded, pending_before)
        result.changed = True  # cleared below when the run turns out to be up to date
        previous = {p.name: installed[p.name] for p in target.packages}
        if check.remove_first:
            names = [name for name, _, _ in check.remove_first]
            backend.unhold(names)
            backend.remove(names)
            result.messages.extend(f"removed {n} {v}: {why}" for n, v, why in check.remove_first)
        if check.to_install:
            _say(env, f"installing {len(check.to_install)} package(s) with {backend.name}")
            _install_packages(backend, check, previous, options)
            result.messages.append(
                "installed " + ", ".join(f"{p.name} {p.version}" for p in install_order(check.to_install))
            )
        if hold_now:
            backend.hold([p.name for p in target.packages])
            result.messages.append("held " + ", ".join(p.name for p in target.packages) + " at this release")
        journal = Journal(root)
        cdi_on, result.cdi = _cdi(facts, options, journal, env)
        changed = _register(engines, facts, options, journal, cdi_on, env, result)
        # Engines an earlier run left unrestarted are retried with this run's changes.
        due = sorted({*changed, *pending_before})
        kept = restart_engines(due, options, journal, env, result)
        changed = [name for name in changed if name in kept]
        result.restart_pending = _left_pending(due, options)
        restarted = bool(pending_before) and _may_restart(options)
        nothing = check.nothing_to_do and not changed and "written" not in result.cdi and not hold_now and not restarted
        if nothing and old_state is not None and old_state.bundle_id == staged.bundle_id:
            result.outcome = "up-to-date"
            result.changed = False
            result.messages.insert(0, "already installed: this bundle is on the node and nothing changed")
            return result
        touched = sorted({*(old_state.engines if old_state else []), *changed, *(["cdi"] if "written" in result.cdi else [])})
        state = NodeState(
            bundle_id=staged.bundle_id,
            signer=staged.signer,
            release=staged.release,
            target=target.describe(),
            package_manager=backend.name,
            packages={p.name: p.version for p in install_order(target.packages)},
            previous=old_state.previous if old_state else previous,
            removed={**(old_state.removed if old_state else {}), **{n: v for n, v, _ in check.remove_first}},
            held=options.hold or bool(old_state and old_state.held),
            runtime_name=options.runtime_name,
            engines=touched,
            restart_pending=result.restart_pending,
            cdi=result.cdi,
            files=changed_files(journal, touched),
            installed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        result.messages.append(f"recorded the install in {save_state(root, state)}")
        return result


def _say(env: NodeEnv, line: str) -> None:
    if env.log is not None:
        env.log(line)


def _preflight(
    target: StagedTarget,
    facts: NodeFacts,
    backend: PackageBackend,
    installed: Dict[str, Optional[str]],
    options: InstallOptions,
    env: NodeEnv,
) -> preflight.Preflight:
    requirements = {req: backend.provides(req) for req in target.requirements}
    check = preflight.check(
        target,
        installed=installed,
        requirements_met=requirements,
        compare=backend.compare_versions,
        free_bytes=env.free(options.root),
        allow_downgrade=options.allow_downgrade,
        root_label=str(options.root),
    )
    if options.cdi == "on" and not facts.driver:
        check.problems.append("--cdi on needs an NVIDIA driver, but neither /proc/driver/nvidia/version nor /dev/nvidiactl exists")
    if options.runtime not in ("auto", "none") and options.runtime not in facts.engines:
        check.notes.append(f"{options.runtime} was not detected on the node; configuring it as asked")
    check.raise_for_problems()
    return check


def _engines_for(runtime: str, facts: NodeFacts) -> Tuple[str, ...]:
    if runtime == "none":
        return ()
    if runtime == "auto":
        return facts.engines
    return (runtime,)


def _install_packages(
    backend: PackageBackend, check: preflight.Preflight, previous: Dict[str, Optional[str]], options: InstallOptions
) -> None:
    ordered = install_order(check.to_install)
    try:
        backend.install([p.path for p in ordered], allow_downgrade=options.allow_downgrade)
    except CommandError as exc:
        undone: List[str] = []
        # Packages that were absent before can be taken out again; older versions cannot be
        # put back because their files are not in the bundle.
        fresh = [p.name for p in reversed(ordered) if previous.get(p.name) is None]
        present = [n for n in fresh if backend.package_state(n) != "not installed"]
        if present:
            with contextlib.suppress(CommandError):
                backend.remove(present)
                undone.append("removed the newly added " + ", ".join(present))
        states = "; ".join(f"{p.name}: {backend.package_state(p.name)}" for p in ordered)
        what = (undone[0] + "; " if undone else "") + f"the node now has {states}"
        raise InstallFailed(f"{backend.name} failed ({exc}); {what}") from exc


def _cdi(facts: NodeFacts, options: InstallOptions, journal: Journal, env: NodeEnv) -> Tuple[bool, str]:
    if options.cdi == "off":
        return False, "skipped: disabled with --cdi off"
    if not facts.driver:
        return False, "skipped: no NVIDIA driver found (no /proc/driver/nvidia/version or /dev/nvidiactl)"
    try:
        plan = env.cdi(options.root)
    except ToolError as exc:
        if options.cdi == "on":
            raise
        return False, f"skipped: {exc}"
    written = apply_changes("cdi", plan.changes, journal, dict(plan.notes))
    source = plan.facts.get("SOURCE", "nvidia-ctk")
    return True, (f"written to {CDI_SPEC} (from {source})" if written else f"{CDI_SPEC} is already current")


def _register(
    engines: Tuple[str, ...],
    facts: NodeFacts,
    options: InstallOptions,
    journal: Journal,
    cdi_on: bool,
    env: NodeEnv,
    result: InstallResult,
) -> List[str]:
    changed: List[str] = []
    runtime = _runtime_options(options, cdi_on)
    if not engines:
        result.messages.append("no container engine registered (none detected or --runtime none)")
    for name in engines:
        plan = env.engine(name).plan(runtime)
        result.messages.extend(f"{name}: {w}" for w in plan.warnings)
        if apply_changes(name, plan.changes, journal, dict(plan.notes)):
            changed.append(name)
            result.engines[name] = f"registered runtime {options.runtime_name!r}"
        else:
            result.engines[name] = f"runtime {options.runtime_name!r} already registered"
    return changed


def restart_engines(changed: List[str], options: InstallOptions, journal: Journal, env: NodeEnv, result: InstallResult) -> List[str]:
    """Restart the changed engines; return those whose change stayed (a reverted one is not recorded)."""
    if not changed:
        return changed
    if not _may_restart(options):
        why = "--no-restart" if options.no_restart else f"--root is {options.root}"
        result.messages.append(f"not restarting {', '.join(changed)} ({why}); restart them to use the runtime")
        return changed
    kept: List[str] = []
    for name in changed:
        unit = SERVICE_UNITS.get(name, name)
        env.services.restart(unit)
        if env.services.is_active(unit):
            result.engines[name] += ", restarted"
            kept.append(name)
            continue
        # Put back what gpu-airgap changed (nothing is recorded once its change was reverted already).
        restored = any(entry.engine == name for entry in journal.entries())
        if restored:
            revert(name, journal, force=True)
        env.services.restart(unit)
        back = "it is running again" if env.services.is_active(unit) else "it is still not running"
        how = "restored its configuration and restarted it" if restored else "restarted it again"
        result.engines[name] = f"did not come back after the change; {how} ({back})"
        result.failed_engines.append(name)
    return kept


def _runtime_options(options: InstallOptions, cdi: bool) -> RuntimeOptions:
    """The engines' options for this install; ``cdi`` when the CDI spec is (or would be) written."""
    return RuntimeOptions(
        root=options.root, runtime_name=options.runtime_name, set_as_default=options.set_as_default, cdi=cdi
    )


def _left_pending(due: List[str], options: InstallOptions) -> List[str]:
    """The engines still to restart after this run: on the live system with ``--no-restart`` only.

    Under another root the engines are not running from it (an image, a chroot): they read the new
    configuration when that system starts them, so nothing is pending.
    """
    return due if options.no_restart and is_live_root(options.root) else []


def _may_restart(options: InstallOptions) -> bool:
    """Engines are restarted only on the live system: under another root they are not ours to touch."""
    return not options.no_restart and is_live_root(options.root)


def _dry_run(
    result: InstallResult,
    check: preflight.Preflight,
    target: StagedTarget,
    engines: Tuple[str, ...],
    facts: NodeFacts,
    options: InstallOptions,
    env: NodeEnv,
    hold_now: bool,
    recorded: bool,
    pending_before: List[str],
) -> InstallResult:
    for name, version, why in check.remove_first:
        result.messages.append(f"would remove {name} {version}: {why}")
    if check.to_install:
        result.messages.append(
            "would install " + ", ".join(f"{p.name} {p.version}" for p in install_order(check.to_install))
        )
    else:
        result.messages.append("packages: already at the bundle's versions")
    if hold_now:
        result.messages.append("would hold " + ", ".join(p.name for p in target.packages))
    # CDI is planned only with a driver, and the engines then enable it: the diff shows that too.
    cdi_on = options.cdi != "off" and facts.driver
    runtime = _runtime_options(options, cdi_on)
    diffs: List[str] = []
    engines_change = False
    would_change: List[str] = []
    for name in engines:
        plan = env.engine(name).plan(runtime)
        result.engines[name] = "would register" if plan.changed else "already registered"
        engines_change = engines_change or plan.changed
        would_change += [name] if plan.changed else []
        diffs.append(unified_diff(plan.changes))
    result.restart_pending = _left_pending(sorted({*would_change, *pending_before}), options)
    result.diff = "".join(diffs)
    # A valid existing CDI spec is kept by a real run, so only a missing one would be written.
    cdi_change = cdi_on and not rooted(options.root, CDI_SPEC).exists()
    # A run that changes nothing else still records this bundle when the node has no record of it.
    result.changed = bool(
        check.to_install or check.remove_first or hold_now or engines_change or cdi_change or not recorded
        or (pending_before and _may_restart(options))
    )
    result.cdi = "off" if options.cdi == "off" else ("would generate" if cdi_on else "skipped: no NVIDIA driver found")
    result.messages.append("dry run: nothing was changed")
    return result
