"""``gpu-airgap install``: verify, plan, then install, hold, register, CDI, restart, record.

The order is the contract (issue 6): nothing under the root changes until the bundle is verified
completely and :func:`~installer.plan.plan_install` has decided the whole run (the node matches a
target, preflight found no problem, every engine's configuration change is planned and every file
the run writes can be written). ``--dry-run`` renders that plan; the real run executes it, and a
step that fails after the node changed rolls the run back (:mod:`installer.rollback`).
Collaborators come in through :class:`~installer.env.NodeEnv`; the plan decides, they act.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from configure.cdi.node import SOURCE_REFRESH, SOURCE_STATIC
from configure.changes import read_optional, unified_diff
from configure.engine import ConfigPlan
from configure.journal import Journal, apply_changes
from configure.revert import revert
from configure.validate import SERVICE_ENGINES, existing_root
from installer import cdi_step, preflight
from installer.backends.base import PackageBackend
from installer.bundle import require_bundle
from installer.env import CDI_SPEC, NodeEnv, engine_unit, engine_units
from installer.freshness import RELEASE_CANDIDATE_NOTE, Policy, age_text
from installer.plan import InstallOptions, InstallPlan, plan_install, runtime_options
from installer.rollback import RunLog, record
from installer.state import save_state
from installer.target import install_order
from installer.workspace import locked_state_dir, staging
from plumbing.errors import CommandError, ExitCode, ToolError
from plumbing.fsutil import is_live_root, rooted
from plumbing.keyfile import check_key_file


@dataclass
class InstallResult:
    """What install did (or, with ``--dry-run``, would do); rendered by the CLI."""

    outcome: str  #: "installed", "up-to-date" or "dry-run"
    node: str
    target: str
    bundle_id: str
    signer: str = ""  #: full fingerprint of the operator key whose signature checked out
    channel: str = "stable"  #: the bundle's upstream channel
    release_candidate: bool = False  #: the experimental channel: not for production
    created: str = ""  #: the bundle's signed build time
    age: str = ""  #: ``built 3 days ago (…)``
    expires: Optional[str] = None  #: the bundle's signed expiry, if any
    packages: Dict[str, str] = field(default_factory=dict)  #: name -> version now (or planned)
    messages: List[str] = field(default_factory=list)
    engines: Dict[str, str] = field(default_factory=dict)  #: engine -> what happened
    cdi: str = ""  #: what happened to CDI, in words
    #: where the node's nvidia.com/gpu spec comes from: nvidia-cdi-refresh | static | none | off
    cdi_source: str = ""
    cdi_report: Dict[str, Any] = field(default_factory=dict)  #: configure.cdi.node's report after the run
    diff: str = ""  #: configuration diff (dry-run)
    failed_engines: List[str] = field(
        default_factory=list
    )  #: engines that did not come back; config restored
    #: engines still to restart (``--no-restart``, or under another root): ``gpu-airgap restart`` does it
    restart_pending: List[str] = field(default_factory=list)
    #: engine -> the units that may run it (k3s/k3s-agent, ...; empty: k0s reloads by itself), for a restart elsewhere
    restart_units: Dict[str, List[str]] = field(default_factory=dict)
    #: whether the node changed (dry-run: would change); what automation such as Ansible reports
    changed: bool = False

    def to_dict(self) -> Dict[str, Any]:
        """The ``--json`` object."""
        return dict(self.__dict__)


class InstallFailed(ToolError):
    """dpkg or rpm failed part-way; the message says what was undone and the state of every package."""


class EngineRestartFailed(ToolError):
    """An engine did not come back with the new runtime; its previous configuration was put back."""

    exit_code = ExitCode.ENGINE_RESTORED

    def __init__(self, engines: Sequence[str]) -> None:
        self.engines = list(engines)
        super().__init__(
            f"{', '.join(self.engines)} did not come back after registering the runtime, so the previous "
            "configuration was restored; the packages stay installed (see `gpu-airgap status`)"
        )


def install(bundle: Path, keyring: Path, options: InstallOptions, env: NodeEnv) -> InstallResult:
    """Install the toolkit from ``bundle`` onto the node under ``options.root`` (``--dry-run``: say what it would do).

    :raises VerificationError: the bundle or its signature is bad (nothing changed).
    :raises TargetMismatch: the bundle has nothing for this node (nothing changed).
    :raises PreflightFailed: listing every problem (nothing changed).
    :raises InstallFailed: the package manager failed; the message gives the state of each package.
    :raises RolledBack: a later step failed; what the run did was undone, the message says what stays.
    """
    options.validate()
    root = options.root
    require_bundle(bundle)
    check_key_file(keyring)
    existing_root(root)
    with locked_state_dir(root) as state_dir, staging(state_dir) as stage:
        _say(env, f"verifying {bundle.name} with {keyring}")
        policy = Policy(allow_expired=options.allow_expired, now=env.clock())
        staged = env.opener(bundle, keyring, stage, fingerprint=options.fingerprint, policy=policy)
        plan = plan_install(staged, options, env)
        if options.dry_run:
            return _render_dry_run(plan, options, policy)
        return _execute(plan, options, env, policy)


def _new_result(plan: InstallPlan, outcome: str, policy: Policy) -> InstallResult:
    bundle = plan.bundle
    result = InstallResult(
        outcome=outcome,
        node=plan.facts.describe(),
        target=plan.target.describe(),
        bundle_id=bundle.bundle_id,
        signer=bundle.signer,
        channel=bundle.channel,
        release_candidate=bundle.channel == "experimental",
        created=bundle.created,
        age=age_text(bundle.created, policy.clock()),
        expires=bundle.expires,
        packages={p.name: p.version for p in plan.target.packages},
    )
    result.messages.extend([RELEASE_CANDIDATE_NOTE] if result.release_candidate else [])
    result.messages.extend(bundle.notes)
    result.messages.extend(plan.preflight.notes)
    result.messages.extend(plan.preflight.change_lines(done=outcome != "dry-run"))
    return result


def _execute(plan: InstallPlan, options: InstallOptions, env: NodeEnv, policy: Policy) -> InstallResult:
    """Carry out ``plan``: packages, hold, CDI, engines (rolled back if one fails), restarts, then the install record."""
    result = _new_result(plan, "installed", policy)
    result.changed = True  # cleared below when the run turns out to be up to date
    journal = Journal(options.root)
    run = RunLog(plan, options, journal)
    try:
        changed = _change_node(plan, options, env, journal, run, result)
    except BaseException as exc:
        instead = run.undo(exc)
        if instead is not None:
            raise instead from exc
        raise
    # Engines an earlier run left unrestarted are retried with this run's changes.
    # podman and LXC read their files for each new container: nothing to restart.
    due = sorted({*(name for name in changed if name in SERVICE_ENGINES), *plan.pending_before})
    kept = restart_engines(due, options, journal, env, result)
    changed = [name for name in changed if name in kept or name not in SERVICE_ENGINES]
    result.restart_pending = _left_pending(due, options)
    restarted = bool(plan.pending_before) and _may_restart(options)
    retired, retire_message = cdi_step.retire_static_spec(options, journal)
    result.messages.extend([retire_message] if retire_message else [])
    result.cdi_report, result.cdi_source, problems = cdi_step.outcome(options)
    result.messages.extend(f"CDI problem: {p}" for p in problems)
    check, old_state = plan.preflight, plan.old_state
    nothing = (
        check.nothing_to_do
        and not changed
        and "written" not in result.cdi
        and not plan.hold
        and not plan.unhold
        and not restarted
        and not retired
    )
    if nothing and plan.recorded:
        result.outcome = "up-to-date"
        result.changed = False
        result.messages.insert(0, "already installed: this bundle is on the node and nothing changed")
        return result
    touched = {
        *(old_state.engines if old_state else []),
        *changed,
        *(["cdi"] if "written" in result.cdi else []),
    }
    if retired:
        touched.discard("cdi")
    state = record(
        plan,
        options,
        journal,
        engines=sorted(touched),
        restart_pending=result.restart_pending,
        cdi=result.cdi,
        complete=True,
    )
    result.messages.append(f"recorded the install in {save_state(options.root, state)}")
    return result


def _change_node(
    plan: InstallPlan,
    options: InstallOptions,
    env: NodeEnv,
    journal: Journal,
    run: RunLog,
    result: InstallResult,
) -> List[str]:
    """The steps that change the node, each recorded in ``run`` first; return the engines changed."""
    check, backend = plan.preflight, plan.backend
    if plan.unhold:
        run.begin()
        run.unheld = True
        backend.unhold(plan.unhold)
        result.messages.append("released the hold on " + ", ".join(plan.unhold))
    if check.remove_first:
        run.begin()
        names = [name for name, _, _ in check.remove_first]
        backend.unhold(names)
        backend.remove(names)
        result.messages.extend(f"removed {n} {v}: {why}" for n, v, why in check.remove_first)
    if check.to_install:
        run.begin()
        _say(env, f"installing {len(check.to_install)} package(s) with {backend.name}")
        _install_packages(backend, check, plan.previous, options)
        result.messages.append(
            "installed " + ", ".join(f"{p.name} {p.version}" for p in install_order(check.to_install))
        )
    if plan.hold:
        run.begin()
        run.held = True
        backend.hold(plan.hold_names)
        result.messages.append(_hold_message(plan, "held", "kept the hold on"))
    cdi_on, result.cdi = cdi_step.write_or_skip(plan, options, journal, env, run)
    return _register(plan, cdi_on, options, journal, env, result, run)


def _hold_message(plan: InstallPlan, held: str, kept: str) -> str:
    """``held A, B at this release``, or ``kept the hold on A, B …`` when they were held before the run."""
    verb = kept if all(name in plan.held for name in plan.hold_names) else held
    return f"{verb} {', '.join(plan.hold_names)} at this release"


def _say(env: NodeEnv, line: str) -> None:
    if env.log is not None:
        env.log(line)


def _install_packages(
    backend: PackageBackend,
    check: preflight.Preflight,
    previous: Dict[str, Optional[str]],
    options: InstallOptions,
) -> None:
    ordered = install_order(check.to_install)
    fresh = [p.name for p in reversed(ordered) if previous.get(p.name) is None]
    # Purged on failure, so that nothing of them stays; config files left by an earlier removal stay.
    untraced = set(backend.without_trace(fresh))
    try:
        backend.install([p.path for p in ordered], allow_downgrade=options.allow_downgrade)
    except CommandError as exc:
        undone: List[str] = []
        # Packages that were absent before can be taken out again; older versions cannot be
        # put back because their files are not in the bundle.
        present = [n for n in fresh if backend.package_state(n) != "not installed"]
        if present:
            with contextlib.suppress(CommandError):
                backend.remove(present)
                backend.remove([n for n in present if n in untraced], purge=True)
                undone.append("removed the newly added " + ", ".join(present))
        states = "; ".join(f"{p.name}: {backend.package_state(p.name)}" for p in ordered)
        what = (undone[0] + "; " if undone else "") + f"the node now has {states}"
        raise InstallFailed(f"{backend.name} failed: {exc}; {what}") from exc


def _register(
    plan: InstallPlan,
    cdi_on: bool,
    options: InstallOptions,
    journal: Journal,
    env: NodeEnv,
    result: InstallResult,
    run: RunLog,
) -> List[str]:
    changed: List[str] = []
    runtime = runtime_options(options, cdi_on)
    if not plan.engines:
        result.messages.append("no container engine registered (none detected or --runtime none)")
    for name, planned in plan.engines.items():
        # The planned change, unless CDI turned out otherwise or a file changed since it was planned.
        config = (
            planned if runtime == plan.runtime and _still_current(planned) else env.engine(name).plan(runtime)
        )
        result.messages.extend(f"{name}: {w}" for w in config.warnings)
        if config.changed:
            run.begin()
        if apply_changes(name, config.changes, journal, dict(config.notes)):
            changed.append(name)
            result.engines[name] = f"registered runtime {options.runtime_name!r}"
        elif config.notes.get("restart_needed"):
            changed.append(name)
            result.engines[name] = (
                f"{config.notes['distro']} registers runtime {options.runtime_name!r} itself when it restarts"
            )
        else:
            result.engines[name] = f"runtime {options.runtime_name!r} already registered"
        if config.next_step:  # podman and LXC have no runtime entry: say what was done or what to run
            result.engines[name] = (
                f"{'configured' if name in changed else 'nothing written'}: {config.next_step}"
            )
    _note_units(result, changed, options)
    return changed


def _confirm_regenerated(name: str, options: InstallOptions, env: NodeEnv, result: InstallResult) -> None:
    """k3s/RKE2 write containerd's config at start: read it back and say whether it has the handler."""
    if name != "containerd":
        return
    try:
        facts = env.engine(name).report(options.root, options.runtime_name)
    except ToolError as exc:
        result.messages.append(f"{name}: cannot read the regenerated config back: {exc}")
        return
    if facts.get("DISTRO") not in ("k3s", "rke2"):
        return
    if facts.get("RUNTIME") == options.runtime_name:
        result.engines[name] += f"; its regenerated config has the {options.runtime_name} handler"
    else:
        result.messages.append(
            f"{name}: {facts['DISTRO']} restarted but its regenerated config has no {options.runtime_name} handler "
            "(is nvidia-container-runtime on its PATH?); `gpu-airgap configure verify` says more"
        )


def _note_units(result: InstallResult, changed: List[str], options: InstallOptions) -> None:
    for name in changed:
        result.restart_units[name] = list(engine_units(name, options.root, options.distro))


def _still_current(config: ConfigPlan) -> bool:
    """Every file ``config`` changes still holds the bytes it was planned from."""
    return all(read_optional(change.path) == change.old for change in config.changes)


def restart_engines(
    changed: List[str], options: InstallOptions, journal: Journal, env: NodeEnv, result: InstallResult
) -> List[str]:
    """Restart the changed engines; return those whose change stayed (a reverted one is not recorded)."""
    if not changed:
        return changed
    if not _may_restart(options):
        why = "--no-restart" if options.no_restart else f"--root is {options.root}"
        result.messages.append(
            f"not restarting {', '.join(changed)} ({why}); restart them to use the runtime"
        )
        return changed
    kept: List[str] = []
    for name in changed:
        unit = engine_unit(env.services, name, options.root, options.distro)
        if not unit:  # k0s reloads containerd when its drop-in changes
            result.engines[name] += ", reloaded by k0s"
            kept.append(name)
            continue
        if env.services.is_stopped(unit):
            # Starting an engine the admin stopped is not ours to do; it reads the new file when started.
            result.engines[name] += ", not restarted: it was stopped, it uses the runtime once started"
            kept.append(name)
            continue
        env.services.restart(unit)
        if env.services.is_active(unit):
            result.engines[name] += f", restarted {unit}"
            kept.append(name)
            _confirm_regenerated(name, options, env, result)
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


def _left_pending(due: List[str], options: InstallOptions) -> List[str]:
    """The engines still to restart after this run: on the live system with ``--no-restart`` only.

    Under another root the engines are not running from it (an image, a chroot): they read the new
    configuration when that system starts them, so nothing is pending.
    """
    return due if options.no_restart and is_live_root(options.root) else []


def _may_restart(options: InstallOptions) -> bool:
    """Engines are restarted only on the live system: under another root they are not ours to touch."""
    return not options.no_restart and is_live_root(options.root)


def _render_dry_run(plan: InstallPlan, options: InstallOptions, policy: Policy) -> InstallResult:
    """What the real run would do with ``plan``, as messages, a diff and ``changed``; nothing is touched."""
    result = _new_result(plan, "dry-run", policy)
    check = plan.preflight
    for name, version, why in check.remove_first:
        result.messages.append(f"would remove {name} {version}: {why}")
    if check.to_install:
        result.messages.append(
            "would install " + ", ".join(f"{p.name} {p.version}" for p in install_order(check.to_install))
        )
    else:
        result.messages.append("packages: already at the bundle's versions")
    if plan.unhold:
        result.messages.append("would release the hold on " + ", ".join(plan.unhold))
    if plan.hold:
        result.messages.append(_hold_message(plan, "would hold", "would keep the hold on"))
    for name, config in plan.engines.items():
        result.messages.extend(f"{name}: {w}" for w in config.warnings)
        result.engines[name] = "would register" if config.changed else "already registered"
        if config.next_step:
            result.engines[name] = (
                f"{'would configure' if config.changed else 'nothing to write'}: {config.next_step}"
            )
    result.restart_pending = _left_pending(plan.restart_due, options)
    result.diff = "".join(unified_diff(config.changes) for config in plan.engines.values())
    # A valid existing CDI spec is kept by a real run, so only a missing one would be written.
    cdi_change = plan.cdi and not rooted(options.root, CDI_SPEC).exists()
    # A run that changes nothing else still records this bundle when the node has no record of it.
    result.changed = bool(
        check.to_install
        or check.remove_first
        or plan.hold
        or plan.unhold
        or plan.engines_changing
        or cdi_change
        or not plan.recorded
        or (plan.pending_before and _may_restart(options))
    )
    if options.cdi == "off":
        result.cdi, result.cdi_source = "off", "off"
    elif plan.cdi_refresh:
        result.cdi = (
            "from nvidia-cdi-refresh: the packages' units write the spec at boot and when the driver changes"
        )
        result.cdi_source = SOURCE_REFRESH
    else:
        result.cdi = "would generate" if plan.cdi else plan.cdi_skipped
        result.cdi_source = SOURCE_STATIC if plan.cdi else "none"
    return result
