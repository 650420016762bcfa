"""``plan_install``: everything an install will do, decided once, before anything on the node changes.

The real run (:func:`installer.install.install`) executes an :class:`InstallPlan` and ``--dry-run``
renders the same plan, so the two cannot disagree. The plan is the one place a run's intended
changes are known: the packages to remove and to install (from preflight), the hold, whether
the CDI spec is generated, each engine's :class:`~configure.engine.ConfigPlan`, and the engines
due a restart. Planning only reads the node; it raises when the node cannot take the bundle, and
also when any file the run would write cannot be written (an invalid config, an immutable file, a
read-only mount or directory), so such a node is refused before its first package.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from configure import node_repos
from configure.cdi.refresh import detect_refresh
from configure.cdi.spec import CDI_SPEC, check_spec
from configure.changes import check_writable, read_optional
from configure.engine import ConfigPlan, RuntimeOptions
from configure.journal import Journal
from configure.nodefacts import NodeFacts
from configure.releases import release_for
from configure.validate import (
    CDI_CHOICES,
    RUNTIME_CHOICES,
    SERVICE_ENGINES,
    SYSTEMD_CGROUP_CHOICES,
    check_runtime_name,
)
from installer import fips, preflight
from installer.backends.base import PackageBackend
from installer.backends.rpm import VERSIONLOCK
from installer.env import NodeEnv
from installer.freshness import check_build_sequence
from installer.state import NodeState, load_state, state_path
from installer.target import StagedBundle, StagedTarget, pick_target
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted
from plumbing.keyfile import parse_fingerprint


@dataclass(frozen=True)
class InstallOptions:
    """The install command's flags."""

    root: Path = Path("/")
    runtime: str = "auto"
    runtime_name: str = "nvidia"
    set_as_default: bool = False
    cdi: str = "auto"
    hold: bool = False
    allow_held: bool = False  #: ``--allow-held``: change held packages; they stay held at the new version
    unhold: bool = False  #: ``--unhold``: release the hold (and change held packages)
    allow_downgrade: bool = False
    no_restart: bool = False
    dry_run: bool = False
    distro: Optional[str] = None  #: which containerd (``--distro``); detected when None
    force: bool = False  #: take the runtime configuration over from the GPU Operator
    fingerprint: Optional[str] = None  #: ``--fingerprint``: the one key of ``--keyring`` to trust
    allow_expired: bool = False  #: ``--allow-expired``: accept a bundle past its signed expiry
    systemd_cgroup: str = "auto"  #: ``--systemd-cgroup``: containerd's SystemdCgroup (auto | true | false)
    fips: bool = False  #: ``--fips``: the node runs in FIPS mode (else its ``fips_enabled`` says)

    def validate(self) -> None:
        """:raises UsageError: for values the command cannot use."""
        if self.runtime not in RUNTIME_CHOICES:
            raise UsageError(f"--runtime must be one of {', '.join(RUNTIME_CHOICES)}, not {self.runtime!r}")
        if self.cdi not in CDI_CHOICES:
            raise UsageError(f"--cdi must be one of {', '.join(CDI_CHOICES)}, not {self.cdi!r}")
        check_runtime_name(self.runtime_name)
        if self.hold and self.unhold:
            raise UsageError("--hold and --unhold contradict each other; pass one of them")
        if self.systemd_cgroup not in SYSTEMD_CGROUP_CHOICES:
            raise UsageError(
                f"--systemd-cgroup must be one of {', '.join(SYSTEMD_CGROUP_CHOICES)}, not {self.systemd_cgroup!r}"
            )
        if self.fingerprint is not None:
            parse_fingerprint(self.fingerprint)


@dataclass(frozen=True)
class InstallPlan:
    """What one install will do on the node (see the module docstring)."""

    bundle: StagedBundle
    facts: NodeFacts
    target: StagedTarget
    backend: PackageBackend
    preflight: preflight.Preflight  #: the packages to remove first and to install, and notes for the user
    previous: Dict[str, Optional[str]]  #: installed version of each target package before the run
    old_state: Optional[NodeState]  #: the record of the last install, if any
    held: Tuple[str, ...]  #: the target packages held on the node before the run
    hold_names: Tuple[str, ...]  #: the packages held after the run: all with --hold, else those held before
    hold: bool  #: (re)set the hold of ``hold_names`` in this run (not held yet, or changed by the run)
    unhold: Tuple[str, ...]  #: the holds ``--unhold`` releases, before the packages change
    cdi: bool  #: generate the CDI spec after the packages are in (a driver is there and --cdi is not off)
    cdi_skipped: str  #: why the CDI spec is not generated, when ``cdi`` is False
    #: nvidia-cdi-refresh will write the spec after the packages are in (so no static spec, but CDI on)
    cdi_refresh: bool
    runtime: RuntimeOptions  #: what the engines are registered with
    engines: Dict[str, ConfigPlan]  #: every engine to register with and its configuration change, in order
    pending_before: Tuple[str, ...]  #: engines an earlier run changed but did not restart

    @property
    def recorded(self) -> bool:
        """The node's install record already names this bundle, as a finished install (no uninstall under way)."""
        return (
            self.old_state is not None
            and self.old_state.bundle_id == self.bundle.bundle_id
            and self.old_state.complete
            and not self.old_state.uninstalling
        )

    @property
    def engines_changing(self) -> List[str]:
        """The engines whose configuration this run changes."""
        # k3s/RKE2 register the runtime themselves: a restart is their change, with no file written.
        return [
            name
            for name, config in self.engines.items()
            if config.changed or config.notes.get("restart_needed")
        ]

    @property
    def restart_due(self) -> List[str]:
        """The engines to restart after the run (or to leave pending): those it changes and those still pending."""
        return sorted(
            {*(name for name in self.engines_changing if name in SERVICE_ENGINES), *self.pending_before}
        )


def plan_install(bundle: StagedBundle, options: InstallOptions, env: NodeEnv) -> InstallPlan:
    """Decide everything an install of the verified ``bundle`` will do on the node under ``options.root``.

    :raises ConfigFormatError: the install record or an engine's configuration cannot be read, or a
        file the run writes cannot be written.
    :raises TargetMismatch: the bundle has nothing for this node.
    :raises PreflightFailed: listing every problem.
    """
    root = options.root
    old_state = load_state(root)  # a damaged record must stop us before anything changes
    if old_state is not None:  # an older build of the installed release: a replay unless --allow-downgrade
        check_build_sequence(
            bundle.release, bundle.created, old_state.release, old_state.built, allow=options.allow_downgrade
        )
    facts = env.detect(root)
    target = pick_target(bundle, facts.package_format, facts.arch, (facts.os.id, *facts.os.id_like))
    backend = env.backend(facts)
    names = preflight.names_to_query(target)
    # one query for these and the node requirements' packages (dpkg answers the later questions from it)
    known = backend.installed_versions([*names, *(r.name for r in target.requirements)])
    installed = {name: known[name] for name in names}
    held = tuple(backend.held([p.name for p in target.packages if installed[p.name] is not None]))
    check = _preflight(target, facts, backend, installed, held, options, env)
    keep = () if options.unhold else tuple(p.name for p in target.packages) if options.hold else held
    changing = {p.name for p in check.to_install}
    cdi_refresh = options.cdi != "off" and refresh_expected(target, root)
    cdi, cdi_skipped = (False, "") if cdi_refresh else _cdi_intent(options, facts)
    # The engines enable CDI when the spec is (or will be) written, so their plans say so too.
    runtime = runtime_options(options, cdi or cdi_refresh)
    plan = InstallPlan(
        bundle=bundle,
        facts=facts,
        target=target,
        backend=backend,
        preflight=check,
        previous={p.name: installed[p.name] for p in target.packages},
        old_state=old_state,
        held=held,
        hold_names=keep,
        hold=any(name not in held or name in changing for name in keep),
        unhold=held if options.unhold else (),
        cdi=cdi,
        cdi_skipped=cdi_skipped,
        cdi_refresh=cdi_refresh,
        runtime=runtime,
        engines={name: env.engine(name).plan(runtime) for name in _engines_for(options.runtime, facts)},
        pending_before=tuple(old_state.restart_pending) if old_state else (),
    )
    check_writable(files_written(plan, root))
    return plan


def files_written(plan: InstallPlan, root: Path) -> List[Path]:
    """Every file the run may write, to prove before the packages that each can be written.

    The package files themselves are dpkg's or rpm's to write (a failure there is rolled back);
    their database directory is checked, since a read-only one fails every step.
    """
    configs = [change.path for config in plan.engines.values() for change in config.changes if change.changed]
    if plan.cdi:
        configs.append(rooted(root, CDI_SPEC))
    paths = [*configs, *(Journal(root).files() if configs else []), state_path(root)]
    check = plan.preflight
    if check.to_install or check.remove_first or plan.hold or plan.unhold:
        database = (
            "/var/lib/dpkg" if plan.backend.name == "dpkg" else (plan.facts.rpm_dbpath or "/var/lib/rpm")
        )
        paths.append(
            rooted(root, database) / "gpu-airgap-probe"
        )  # the directory: dpkg and rpm replace files in it
    if (plan.hold or plan.unhold) and plan.backend.name == "rpm":
        paths.append(rooted(root, VERSIONLOCK))
    return paths


def refresh_expected(target: StagedTarget, root: Path) -> bool:
    """Whether nvidia-cdi-refresh will be the spec's source once the target's packages are in.

    Units already on the root keep their enablement through an upgrade (debhelper and rpm
    re-enable only what was enabled), so their state now decides; otherwise the release table
    says whether the packages ship units that their maintainer scripts enable.
    """
    current = detect_refresh(root)
    if current.present:
        return current.active
    base = next((p for p in target.packages if p.name == "nvidia-container-toolkit-base"), None)
    release = release_for(base.version) if base is not None else None
    return release is not None and release.has_refresh_units


def runtime_options(options: InstallOptions, cdi: bool) -> RuntimeOptions:
    """The engines' options for this install; ``cdi`` when the CDI spec is (or will be) written."""
    return RuntimeOptions(
        root=options.root,
        runtime_name=options.runtime_name,
        set_as_default=options.set_as_default,
        cdi=cdi,
        distro=options.distro,
        force=options.force,
        systemd_cgroup=options.systemd_cgroup,
    )


def _preflight(
    target: StagedTarget,
    facts: NodeFacts,
    backend: PackageBackend,
    installed: Dict[str, Optional[str]],
    held: Tuple[str, ...],
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
        held=held,
        allow_held=options.allow_held or options.unhold,
    )
    if options.cdi == "on" and not facts.driver:
        check.problems.append(
            "--cdi on needs an NVIDIA driver, but neither /proc/driver/nvidia/version nor /dev/nvidiactl exists"
        )
    if options.runtime not in ("auto", "none") and options.runtime not in facts.engines:
        check.notes.append(f"{options.runtime} was not detected on the node; configuring it as asked")
    unsupported = facts.system.unsupported_note()
    if unsupported is not None:
        check.notes.append(unsupported)
    if target.format == "rpm" and (options.fips or fips.fips_enabled(options.root)):
        problem = fips.fips_problem(target.packages, fips.rpm_query)
        if problem is not None:
            check.problems.append(problem)
    check.raise_for_problems()
    # a later upgrade from another repository could replace what we install: said, never refused
    holding = options.hold or (bool(held) and not options.unhold)
    check.notes.extend(
        node_repos.competing_notes(options.root, target.format, [p.name for p in target.packages], holding)
    )
    return check


def _cdi_intent(options: InstallOptions, facts: NodeFacts) -> Tuple[bool, str]:
    """Whether the run generates the CDI spec, and why not.

    :raises ConfigFormatError: with ``--cdi on``, when the existing spec is invalid (the run would
        refuse to replace it after the packages).
    """
    if options.cdi == "off":
        return False, "skipped: disabled with --cdi off"
    if not facts.driver:
        return False, "skipped: no NVIDIA driver found (no /proc/driver/nvidia/version or /dev/nvidiactl)"
    path = rooted(options.root, CDI_SPEC)
    existing = read_optional(path)
    problems = check_spec(existing)[1] if existing is not None else []
    if problems:
        detail = f"the existing CDI spec is invalid ({'; '.join(problems)}); fix it, remove it or run `configure cdi --force`"
        if options.cdi == "on":
            raise ConfigFormatError(path, detail)
        return False, f"skipped: {path}: {detail}"
    return True, ""


def _engines_for(runtime: str, facts: NodeFacts) -> Tuple[str, ...]:
    if runtime == "none":
        return ()
    if runtime == "auto":
        return facts.engines
    return (runtime,)
