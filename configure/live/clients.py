"""The engine clients of ``configure verify --live``: crictl, ctr, docker and podman.

Each client starts one throwaway container through the runtime gpu-airgap registered, on the
node's own engine, and removes it again:

- crictl (Kubernetes nodes, containerd or CRI-O): a pod sandbox with ``--runtime HANDLER``, in the
  node's network namespace (no CNI needed), and one container of the same image in it. This is
  the path a pod with ``runtimeClassName`` takes.
- ctr (containerd without crictl): a container with the registered runtime's binary
  (``--runc-binary``); it proves the binary and containerd's shim work, not the CRI handler.
- docker: ``docker create --runtime NAME`` + ``start``.
- podman (CRI-O's OCI hook mode, or CRI-O without crictl): ``podman create`` with the hooks
  directory gpu-airgap wrote (or ``--runtime BINARY``) + ``start``.

Images are never pulled: a client uses ``--image`` or an image already on the node (containerd's
sandbox image, else a ``pause`` image), checks that it is there, and passes ``--no-pull`` /
``--pull never``. A container counts as run when it is running, or has exited 0, after start.

Every external command goes through a :class:`Runner` (``ProcRunner`` in :mod:`configure.live`),
so the logic is tested with a scripted fake. This module holds the shape every client shares;
:mod:`configure.live.cri` has crictl and ctr, :mod:`configure.live.engine_cli` docker and podman.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

#: how containerd (and crictl) name the namespace CRI images live in
CRI_NAMESPACE = "k8s.io"
NAME_PREFIX = "gpu-airgap-live-"


@dataclass(frozen=True)
class Completed:
    """What a command did: exit status and output (text)."""

    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        """True on exit status 0."""
        return self.returncode == 0

    def reason(self) -> str:
        """The line of the output that says what went wrong (the last one of stderr, else stdout)."""
        lines = [line.strip() for line in (self.stderr or self.stdout).splitlines() if line.strip()]
        return lines[-1] if lines else f"exit status {self.returncode}"


class Runner(Protocol):
    """Runs the engine clients; the real one is ``configure.live.ProcRunner``."""

    def run(self, argv: Sequence[str], timeout: float) -> Completed:
        """Run ``argv``; never raises for a non-zero exit, a timeout or a missing program."""
        ...

    def which(self, name: str) -> Optional[str]:
        """The full path of ``name`` on PATH, or None."""
        ...

    def exists(self, path: str) -> bool:
        """True when ``path`` exists (an engine's socket)."""
        ...


class Outcome(str, Enum):
    """How one engine's live check ended."""

    RAN = "ran"  #: a container started through the runtime
    FAILED = "failed"  #: the engine or the runtime refused or broke the container
    CANNOT_RUN = "cannot-run"  #: nothing was tried: no client, no engine, no local image


@dataclass(frozen=True)
class LiveResult:
    """One engine's live check, as one sentence."""

    engine: str
    outcome: Outcome
    detail: str
    client: str = ""
    image: str = ""


@dataclass(frozen=True)
class Probe:
    """What to start: through which handler or binary, which image, with which environment."""

    engine: str
    handler: str = ""  #: CRI runtime handler / docker runtime name; "" = the engine's default
    binary: str = ""  #: the runtime binary the configuration names (ctr, podman --runtime)
    image: Optional[str] = None  #: --image; None: pick an image already on the node
    sandbox_image: str = ""  #: containerd's configured sandbox image, when the config sets one
    hooks_dir: str = ""  #: podman --hooks-dir (CRI-O hook mode under another root)
    devices: Tuple[str, ...] = ()  #: podman --device (CDI device names)
    env: Dict[str, str] = field(default_factory=dict)
    timeout: float = 60.0

    def env_options(self) -> List[str]:
        """``--env KEY=VALUE`` for each of :attr:`env`, sorted (ctr, docker and podman spell it alike)."""
        return [arg for key, value in sorted(self.env.items()) for arg in ("--env", f"{key}={value}")]


def unique_name() -> str:
    """A container/pod name no one else uses."""
    return NAME_PREFIX + os.urandom(4).hex()


def is_pause_image(ref: str) -> bool:
    """``registry.k8s.io/pause:3.9``, ``pause:3.6``...: images that only wait, safe to start anywhere."""
    last = ref.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[0] == "pause"


class Client:
    """The shared shape: ``check(probe)`` -> :class:`LiveResult`, with ``base`` argv before each command."""

    name = ""

    def __init__(self, runner: Runner, base: Sequence[str]) -> None:
        self.runner = runner
        self.base = list(base)

    def call(self, probe: Probe, *args: str) -> Completed:
        """Run ``base + args``."""
        return self.runner.run([*self.base, *args], probe.timeout)

    def result(self, probe: Probe, outcome: Outcome, detail: str, image: str = "") -> LiveResult:
        """A result of this client for ``probe``."""
        return LiveResult(probe.engine, outcome, detail, self.name, image)

    def cannot(self, probe: Probe, detail: str) -> LiveResult:
        """Nothing was tried."""
        return self.result(probe, Outcome.CANNOT_RUN, detail)

    def no_image(self, probe: Probe) -> LiveResult:
        """No usable local image: say which and how to name one."""
        if probe.image:
            return self.cannot(probe, f"the image {probe.image} is not on the node (it is never pulled)")
        return self.cannot(probe, "no pause image is on the node to start; pass --image with an image it has")

    def verdict(self, probe: Probe, image: str, state: str, exit_code: int, via: str) -> LiveResult:
        """RAN for a running container or one that exited 0, else FAILED naming the state."""
        if state in ("running", "CONTAINER_RUNNING") or (
            state in ("exited", "CONTAINER_EXITED") and exit_code == 0
        ):
            return self.result(probe, Outcome.RAN, f"a container of {image} started {via}", image)
        return self.result(
            probe,
            Outcome.FAILED,
            f"the container of {image} started {via} is {state} (exit code {exit_code})",
            image,
        )


def left_behind(result: LiveResult, what: str, removal: Completed) -> LiveResult:
    """``result``, saying so when the throwaway container or pod could not be removed."""
    if removal.ok:
        return result
    return replace(result, detail=f"{result.detail}; {what} could not be removed ({removal.reason()})")


def json_path(text: str, *keys: str) -> Any:
    """``json.loads(text)[k1][k2]...``, or None when the text or a key is missing."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        return None
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
