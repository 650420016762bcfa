"""The installer's collaborators: the seams :mod:`installer.install` works through, and the real ones.

Install, uninstall and status take a :class:`NodeEnv`; tests replace single fields (the bundle
opener, the service manager, the engine registry) and keep the rest real.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence, Tuple

from configure.cdi import spec as cdi_spec
from configure.distros import detection
from configure.engine import ConfigPlan, Engine
from configure.nodefacts import NodeFacts, detect_node, proc_runner
from configure.validate import ENGINES
from installer.backends import make_backend
from installer.backends.base import PackageBackend
from installer.freshness import Policy, utc_now
from installer.target import StagedBundle
from plumbing import proc
from plumbing.errors import CommandError
from plumbing.progress import Meter

#: Where the CDI spec goes (node path) and the engines the installer knows, in detection order.
CDI_SPEC = cdi_spec.CDI_SPEC
ENGINE_NAMES = ENGINES
SERVICE_UNITS = {"containerd": "containerd", "docker": "docker", "crio": "crio"}


class BundleOpener(Protocol):
    """Verify a bundle completely against ``keyring`` and stage its packages under ``staging_dir``."""

    def __call__(
        self,
        bundle: Path,
        keyring: Path,
        staging_dir: Path,
        *,
        fingerprint: Optional[str] = None,
        policy: Optional[Policy] = None,
    ) -> StagedBundle:
        """:raises VerificationError: for a bad signature, wrong key, any digest mismatch, or an expired bundle."""
        ...


class ServiceManager(Protocol):
    """Restart a service and ask whether it runs (systemd on real nodes)."""

    def restart(self, unit: str) -> None:
        """Restart ``unit``; failures surface through :meth:`is_active`."""
        ...

    def is_active(self, unit: str) -> bool:
        """True when ``unit`` runs."""
        ...

    def is_stopped(self, unit: str) -> bool:
        """True when ``unit`` is not running and has not failed: someone stopped it (or it never ran)."""
        ...


#: how long one ``systemctl restart`` may take (containerd and dockerd stop their containers first);
#: a restart that takes longer counts as an engine that did not come back
RESTART_TIMEOUT = 300.0


class Systemd:
    """:class:`ServiceManager` over ``systemctl``."""

    def restart(self, unit: str) -> None:
        """``systemctl restart UNIT``; a failure or a timeout is seen by :meth:`is_active`.

        ``reset-failed`` first: a unit that failed to start a few times in a row (our own failed
        restart, then the restore) would otherwise hit its start limit and refuse the restart.
        """
        proc.run(["systemctl", "reset-failed", unit], check=False, timeout=30)
        try:
            proc.run(["systemctl", "restart", unit], check=False, timeout=RESTART_TIMEOUT)
        except CommandError:
            return  # timed out: still not active, which the caller treats as did not come back

    def is_active(self, unit: str) -> bool:
        """``systemctl is-active --quiet UNIT``."""
        return proc.run(["systemctl", "is-active", "--quiet", unit], check=False, timeout=30).returncode == 0

    def is_stopped(self, unit: str) -> bool:
        """``systemctl is-active UNIT`` says ``inactive`` (``failed`` or ``activating`` are not stopped)."""
        state = proc.run(["systemctl", "is-active", unit], check=False, timeout=30).stdout
        return state.decode("utf-8", "replace").strip() == "inactive"


def engine_units(name: str, root: Path, distro: Optional[str] = None) -> Tuple[str, ...]:
    """The units that may run engine ``name`` (containerd: its distribution's; none for k0s, which reloads)."""
    if name != "containerd":
        return (SERVICE_UNITS.get(name, name),)
    return detection.choose(root, distro).units


def engine_unit(services: ServiceManager, name: str, root: Path, distro: Optional[str] = None) -> str:
    """The unit to restart for engine ``name``; "" when nothing needs a restart (k0s reloads by itself).

    containerd's is its distribution's (:func:`configure.distros.detection.choose`): ``k3s``/``k3s-agent``,
    ``rke2-server``/``rke2-agent``, MicroK8s's snap service or ``containerd``; of two candidates the
    one that runs.
    """
    units = engine_units(name, root, distro)
    if len(units) < 2:
        return (*units, "")[0]
    active = [unit for unit in units if services.is_active(unit)]
    return (active or list(units) or [""])[0]


def default_engine(name: str) -> Engine:
    """The configure library's engine ``name`` (the registry in :mod:`configure.engines`).

    :raises UsageError: for an engine this build does not have.
    """
    from configure.engines import get_engine

    return get_engine(name)


def plan_cdi(root: Path) -> ConfigPlan:
    """Plan the CDI spec with the installed ``nvidia-ctk cdi generate`` (device nodes under another root)."""
    return cdi_spec.plan_spec(root)


def default_opener(
    bundle: Path,
    keyring: Path,
    staging_dir: Path,
    meter: Optional[Meter] = None,
    *,
    fingerprint: Optional[str] = None,
    policy: Optional[Policy] = None,
) -> StagedBundle:
    """Verify and stage with :mod:`installer.bundle` (see :mod:`installer.source`), reporting bytes to ``meter``."""
    from installer.source import open_verified

    return open_verified(bundle, keyring, staging_dir, meter, fingerprint=fingerprint, policy=policy)


def metered_opener(meter: Meter) -> BundleOpener:
    """:func:`default_opener` that reports the bytes it verifies to ``meter`` (the CLI's terminal meter)."""
    return functools.partial(default_opener, meter=meter)


def free_bytes(path: Path) -> int:
    """Free space on the filesystem that holds ``path``."""
    return shutil.disk_usage(path).free


@dataclass
class NodeEnv:
    """Everything install/uninstall/status reach the outside world through."""

    opener: BundleOpener = default_opener
    detect: Callable[[Path], NodeFacts] = lambda root: detect_node(root, proc_runner, proc.which)
    backend: Callable[[NodeFacts], PackageBackend] = lambda f: make_backend(
        f.package_format, f.root, f.rpm_dbpath
    )
    engine: Callable[[str], Engine] = default_engine
    services: ServiceManager = Systemd()  # noqa: RUF009 - stateless, sharing it is fine
    cdi: Callable[[Path], ConfigPlan] = plan_cdi
    free: Callable[[Path], int] = free_bytes
    engine_names: Sequence[str] = ENGINE_NAMES
    log: Optional[Callable[[str], None]] = None  #: progress lines (the CLI prints them on stderr)
    clock: Callable[[], datetime] = utc_now  #: judges a bundle's age and expiry
