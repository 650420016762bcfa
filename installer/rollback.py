"""One install run's undo: the record it leaves while under way, and the rollback when a later step fails.

Before its first change the run writes ``state.json`` as unfinished (:meth:`RunLog.begin`), so a
run that is killed still leaves a record: ``status`` says it did not finish and ``uninstall``
removes what it did. A run that fails with an error undoes its own changes in reverse
(:meth:`RunLog.undo`): the configuration files it wrote (the journal since the run began), the hold
it set, the packages that were not on the node before; then ``state.json`` gets its old bytes back.
What cannot be undone (an upgrade: the older packages are not in the bundle) stays recorded as
unfinished, and the error says so.
"""

from __future__ import annotations

import contextlib
import time
from typing import List, Optional, Sequence

from configure.changes import read_optional
from configure.journal import Journal
from installer.backends.base import PackageBackend
from installer.plan import InstallOptions, InstallPlan
from installer.state import NodeState, changed_files, save_state, state_path
from installer.target import install_order
from plumbing.errors import ToolError
from plumbing.fsutil import atomic_write


class RolledBack(ToolError):
    """A step failed after the node changed; what the run did was undone (the sentence says what stays)."""

    def __init__(self, cause: ToolError, clause: str) -> None:
        self.cause = cause
        self.exit_code = cause.exit_code
        super().__init__(f"{cause}; {clause}")


def record(
    plan: InstallPlan,
    options: InstallOptions,
    journal: Journal,
    *,
    engines: Sequence[str],
    restart_pending: Sequence[str],
    cdi: str,
    complete: bool,
) -> NodeState:
    """The install record of ``plan``'s run: complete at the end, unfinished while it is under way."""
    old = plan.old_state
    return NodeState(
        bundle_id=plan.bundle.bundle_id,
        signer=plan.bundle.signer,
        release=plan.bundle.release,
        built=plan.bundle.created,
        channel=plan.bundle.channel,
        target=plan.target.describe(),
        package_manager=plan.backend.name,
        packages={p.name: p.version for p in install_order(plan.target.packages)},
        previous=old.previous if old else plan.previous,
        removed={**(old.removed if old else {}), **{n: v for n, v, _ in plan.preflight.remove_first}},
        held=bool(plan.hold_names),
        runtime_name=options.runtime_name,
        distro=options.distro,
        engines=list(engines),
        restart_pending=list(restart_pending),
        cdi=cdi,
        files=changed_files(journal, list(engines)),
        installed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        complete=complete,
    )


def is_present(backend: PackageBackend, name: str) -> bool:
    """``name`` is on the node in any state that needs removing (installed, unpacked, half-configured, ...)."""
    state = backend.package_state(name)
    return state != "not installed" and "config files remain" not in state


class RunLog:
    """What one install run changed so far (see the module docstring)."""

    def __init__(self, plan: InstallPlan, options: InstallOptions, journal: Journal) -> None:
        self.plan = plan
        self.options = options
        self.journal = journal
        self.mark = journal.mark()
        self.state_before = read_optional(state_path(options.root))
        self.begun = False
        self.held = False  #: the run set the hold
        self.unheld = False  #: the run released the hold (``--unhold``)

    def begin(self) -> None:
        """Record the run as unfinished before its first change (once per run)."""
        if self.begun:
            return
        plan, old = self.plan, self.plan.old_state
        engines = sorted(
            {*(old.engines if old else []), *plan.engines_changing, *(["cdi"] if plan.cdi else [])}
        )
        pending = old.restart_pending if old else []
        save_state(
            self.options.root,
            record(
                plan,
                self.options,
                self.journal,
                engines=engines,
                restart_pending=pending,
                cdi="",
                complete=False,
            ),
        )
        self.begun = True

    def undo(self, error: BaseException) -> Optional[ToolError]:
        """Roll back what the run did after ``error``; return the error to raise instead (None: ``error`` itself)."""
        if not self.begun:
            return None
        done: List[str] = []
        failed: List[str] = []
        backend = self.plan.backend
        try:
            restored = self.journal.undo_since(self.mark)
            if restored:
                done.append(f"put back {len(restored)} configuration file(s)")
        except ToolError as exc:
            failed.append(f"the configuration could not be put back ({exc})")
        self._undo_hold(done, failed)
        fresh = [
            p.name
            for p in reversed(install_order(self.plan.target.packages))
            if self.plan.previous.get(p.name) is None and is_present(backend, p.name)
        ]
        if fresh:
            try:
                backend.remove(fresh)
                done.append("removed " + ", ".join(fresh))
            except ToolError as exc:
                failed.append(f"{', '.join(fresh)} could not be removed ({exc})")
        left = self._left_behind()
        if not left and not failed:
            self._restore_record()
        clause = "the install was rolled back" + (f" ({', '.join(done)})" if done else "")
        if left:
            clause += f", but {', '.join(left)} stay (the older packages are not in the bundle)"
        clause += "".join(f"; {f}" for f in failed)
        removed = [f"{n} {v}" for n, v, _ in self.plan.preflight.remove_first]
        if removed:
            clause += f"; {', '.join(removed)} had been removed first and stay removed"
        if left or failed:
            clause += ": see `gpu-airgap status`"
        if not isinstance(error, ToolError) or not (done or left or failed or removed):
            return None
        return RolledBack(error, clause)

    def _undo_hold(self, done: List[str], failed: List[str]) -> None:
        """Release the holds the run set and put back those it released; holds from before stay."""
        plan, backend = self.plan, self.plan.backend
        set_here = [name for name in plan.hold_names if name not in plan.held] if self.held else []
        try:
            if set_here:
                backend.unhold(set_here)
                done.append("released the hold")
            if self.unheld:
                backend.hold([name for name in plan.unhold if is_present(backend, name)])
                done.append("put the hold back")
        except ToolError as exc:
            failed.append(f"the hold could not be put back as it was ({exc})")

    def _left_behind(self) -> List[str]:
        """The target packages whose state differs from before the run, after the rollback."""
        backend, left = self.plan.backend, []
        for package in install_order(self.plan.target.packages):
            before = self.plan.previous.get(package.name)
            now = backend.installed_version(package.name)
            if now != before and (before is not None or is_present(backend, package.name)):
                left.append(f"{package.name} {now or backend.package_state(package.name)}")
        return left

    def _restore_record(self) -> None:
        path = state_path(self.options.root)
        if self.state_before is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        else:
            atomic_write(path, self.state_before, mode=0o600)
