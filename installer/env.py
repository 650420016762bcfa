"""The installer's collaborators: the seams :mod:`installer.install` works through, and the real ones.

Install, uninstall and status take a :class:`NodeEnv`; tests replace single fields (the bundle
opener, the service manager, the engine registry) and keep the rest real.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

import yaml

from configure import proc
from configure.engine import Engine
from configure.errors import ToolError
from configure.fsutil import rooted
from installer.backend import PackageBackend, make_backend
from installer.node import NodeFacts, detect_node, proc_runner
from installer.target import StagedBundle

#: Where the CDI spec goes (node path) and the engines the installer knows, in detection order.
CDI_SPEC = "/etc/cdi/nvidia.yaml"
ENGINE_NAMES = ("containerd", "docker", "crio")
SERVICE_UNITS = {"containerd": "containerd", "docker": "docker", "crio": "crio"}


class BundleOpener(Protocol):
    """Verify a bundle completely against ``keyring`` and stage its packages under ``staging_dir``."""

    def __call__(self, bundle: Path, keyring: Path, staging_dir: Path) -> StagedBundle:
        """:raises VerificationError: for a bad signature, wrong key, or any digest mismatch."""
        ...


class ServiceManager(Protocol):
    """Restart a service and ask whether it runs (systemd on real nodes)."""

    def restart(self, unit: str) -> None:
        """Restart ``unit``; failures surface through :meth:`is_active`."""
        ...

    def is_active(self, unit: str) -> bool:
        """True when ``unit`` runs."""
        ...


class Systemd:
    """:class:`ServiceManager` over ``systemctl``."""

    def restart(self, unit: str) -> None:
        """``systemctl restart UNIT`` (a failure is seen by :meth:`is_active`)."""
        proc.run(["systemctl", "restart", unit], check=False, timeout=120)

    def is_active(self, unit: str) -> bool:
        """``systemctl is-active --quiet UNIT``."""
        return proc.run(["systemctl", "is-active", "--quiet", unit], check=False, timeout=30).returncode == 0


def generate_cdi(root: Path) -> bytes:
    """Run the installed ``nvidia-ctk cdi generate`` and return the spec it prints (checked to be a CDI spec).

    :raises ToolError: when nvidia-ctk is missing, fails, or prints something that is not a CDI spec.
    """
    ctk = rooted(root, "/usr/bin/nvidia-ctk")
    if not ctk.exists():
        raise ToolError(f"{ctk} is missing, so the CDI spec cannot be generated")
    argv = [str(ctk), "cdi", "generate"]
    if str(root) not in ("", "/"):
        argv.append(f"--driver-root={root}")
    out = proc.run(argv, timeout=120).stdout
    check_cdi_spec(out, ctk)
    return out


def check_cdi_spec(data: bytes, origin: object) -> None:
    """:raises ToolError: unless ``data`` is YAML with ``cdiVersion``, ``kind`` and ``devices``."""
    try:
        spec = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise ToolError(f"{origin} did not produce valid YAML for the CDI spec") from exc
    if not isinstance(spec, dict) or not {"cdiVersion", "kind", "devices"} <= set(spec):
        raise ToolError(f"{origin} did not produce a CDI spec (it needs cdiVersion, kind and devices)")


def default_engine(name: str) -> Engine:
    """The configure library's engine ``name`` (containerd, docker, crio)."""
    try:
        from configure import engines  # type: ignore[attr-defined, unused-ignore]
    except ImportError as exc:  # pragma: no cover - only in a build without engines
        raise ToolError(f"this build of gpu-airgap cannot configure {name}") from exc
    engine: Engine = engines.get(name)
    return engine


def default_opener(bundle: Path, keyring: Path, staging_dir: Path) -> StagedBundle:
    """Verify and stage with :mod:`installer.bundle` (see :mod:`installer.source`)."""
    from installer.source import open_verified

    return open_verified(bundle, keyring, staging_dir)


def free_bytes(path: Path) -> int:
    """Free space on the filesystem that holds ``path``."""
    return shutil.disk_usage(path).free


@dataclass
class NodeEnv:
    """Everything install/uninstall/status reach the outside world through."""

    opener: BundleOpener = default_opener
    detect: Callable[[Path], NodeFacts] = lambda root: detect_node(root, proc_runner, proc.which)
    backend: Callable[[NodeFacts], PackageBackend] = lambda f: make_backend(f.package_format, f.root, f.rpm_dbpath)
    engine: Callable[[str], Engine] = default_engine
    services: ServiceManager = Systemd()  # noqa: RUF009 - stateless, sharing it is fine
    cdi: Callable[[Path], bytes] = generate_cdi
    free: Callable[[Path], int] = free_bytes
    engine_names: Sequence[str] = ENGINE_NAMES
    log: Optional[Callable[[str], None]] = None  #: progress lines (the CLI prints them on stderr)
