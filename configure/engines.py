"""The registry of container engines: ``configure <name>``, ``report``, ``verify`` and ``revert`` look them up here.

One line per engine.
"""

from __future__ import annotations

from typing import Callable, Dict, List

from configure.crio import CrioEngine
from configure.distros.engine import DistroContainerdEngine
from configure.docker import DockerEngine
from configure.engine import Engine
from configure.lxc.engine import LxcEngine
from configure.podman.engine import PodmanEngine
from configure.validate import ENGINES
from plumbing.errors import UsageError

EngineFactory = Callable[[], Engine]

_FACTORIES: Dict[str, EngineFactory] = {
    "containerd": DistroContainerdEngine,
    "docker": DockerEngine,
    "crio": CrioEngine,
    "podman": PodmanEngine,
    "lxc": LxcEngine,
}

#: every engine the command line offers, whether or not this build has it yet
KNOWN = ENGINES


def engine_names() -> List[str]:
    """The engines this build can configure."""
    return sorted(_FACTORIES)


def get_engine(name: str) -> Engine:
    """Build the engine called ``name``.

    :raises UsageError: for an engine this build does not have.
    """
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UsageError(f"{name} is not supported by this build (available: {', '.join(engine_names())})")
    return factory()
