"""``configure verify --live``: start a throwaway container through the registered runtime, on the node's engine.

The static checks of ``configure verify`` come first; a node with problems there gets no container.
Then, per engine that gpu-airgap configured (or ``--runtime``):

- containerd: crictl when it is installed (Kubernetes nodes: a pod with the RuntimeClass handler),
  else ctr with the runtime's ``BinaryName``; the socket is ``/run/containerd/containerd.sock``
  unless ``--address`` names another (k3s: ``/run/k3s/containerd/containerd.sock``).
- docker: the docker CLI (``--address`` or its own default: ``DOCKER_HOST``, the current context).
- crio: in OCI hook mode podman with the hook; otherwise crictl on ``/var/run/crio/crio.sock``,
  else podman with the runtime binary.
- podman: ``podman create --device nvidia.com/gpu=all`` (or the devices ``--visible-devices`` names)
  when it uses CDI; with the hooks directory we wrote to when it uses the OCI hook.
- lxc: not started ("cannot run"): restart a configured container to check it.

An engine that is not running, a missing client or no usable local image is reported as "cannot
run" (nothing was tried); a runtime that refuses or breaks the container is a problem (exit 9).
Under another ``--root``, engines with a socket need ``--address``: the host's default socket
belongs to the host's engine, not to that root's configuration.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from configure.cdi.spec import KIND
from configure.commands import engine_notes, recorded_config, runtimeclass_handler, verify_engines
from configure.crio import OCI_HOOK
from configure.engines import get_engine
from configure.journal import Journal
from configure.live.clients import Completed, LiveResult, Outcome, Probe, Runner
from configure.live.cri import CrictlClient, CtrClient
from configure.live.engine_cli import DockerClient, PodmanClient
from plumbing import proc
from plumbing.errors import CommandError, ProblemsFound, ToolError, UsageError
from plumbing.fsutil import is_live_root, rooted

__all__ = [
    "LiveCheckNotRun",
    "LiveOptions",
    "LiveResult",
    "Outcome",
    "ProcRunner",
    "as_json",
    "check_engine",
    "live_check",
    "raise_for",
    "render",
]

DEFAULT_SOCKETS = {"containerd": "/run/containerd/containerd.sock", "crio": "/var/run/crio/crio.sock"}
LIVE_PREFIX = {Outcome.RAN: "ok", Outcome.FAILED: "PROBLEM", Outcome.CANNOT_RUN: "CANNOT RUN"}


class LiveCheckNotRun(ToolError):
    """The live check could not start a container for some engine (nothing is known to be wrong)."""


@dataclass(frozen=True)
class LiveOptions:
    """What ``verify --live`` was asked for."""

    address: Optional[str] = None  #: the engine's socket (one engine only)
    image: Optional[str] = None  #: an image already on the node
    visible_devices: Optional[str] = (
        None  #: NVIDIA_VISIBLE_DEVICES for the container (all, nvidia.com/gpu=all)
    )
    timeout: float = 60.0  #: seconds per engine command


class ProcRunner:
    """The real :class:`~configure.live.clients.Runner`: :func:`configure.proc.run`, never raising."""

    def run(self, argv: Sequence[str], timeout: float) -> Completed:
        """Run ``argv``; a timeout or a missing program becomes a failed :class:`Completed`."""
        try:
            result = proc.run(argv, check=False, timeout=timeout)
        except CommandError as exc:  # timed out
            return Completed(-1, "", f"{argv[0]} {exc.stderr}")
        except ToolError as exc:  # not installed
            return Completed(127, "", str(exc))
        return Completed(
            result.returncode,
            result.stdout.decode("utf-8", "replace"),
            result.stderr.decode("utf-8", "replace"),
        )

    def which(self, name: str) -> Optional[str]:
        """:func:`configure.proc.which`."""
        return proc.which(name)

    def exists(self, path: str) -> bool:
        """True when ``path`` exists."""
        return Path(path).exists()


def live_check(
    root: Path, engines: Optional[Sequence[str]], options: LiveOptions, runner: Runner
) -> List[LiveResult]:
    """One :class:`LiveResult` per engine ``verify`` checks (see the module docstring)."""
    names = verify_engines(root, engines)
    if options.address and len(names) > 1:
        raise UsageError(
            f"--address names one engine's socket; pass --runtime with one of {', '.join(names)}"
        )
    return [check_engine(name, root, options, runner) for name in names]


def check_engine(engine: str, root: Path, options: LiveOptions, runner: Runner) -> LiveResult:
    """Start one container through ``engine``'s registered runtime."""
    notes = engine_notes(Journal(root), engine)
    runtime = str(notes.get("runtime_name", "nvidia"))
    env = {"NVIDIA_VISIBLE_DEVICES": options.visible_devices} if options.visible_devices else {}
    if engine == "podman":
        return _podman(_podman_probe(root, notes, options, env), runner)
    if engine == "lxc":  # a throwaway LXC container needs a root filesystem we do not have
        return LiveResult(
            engine,
            Outcome.CANNOT_RUN,
            "--live does not start LXC containers; restart a configured one (lxc-stop, lxc-start) to check it",
        )
    if engine == "crio" and notes.get("mode") == "hook":
        hooks_dir = "" if is_live_root(root) else str(rooted(root, posixpath.dirname(OCI_HOOK)))
        probe = Probe(engine, image=options.image, hooks_dir=hooks_dir, env=env, timeout=options.timeout)
        return _podman(probe, runner)
    facts = get_engine(engine).report(root, runtime, recorded_config(notes))
    handler = (runtimeclass_handler(root) or runtime) if engine != "docker" else runtime
    probe = Probe(
        engine,
        handler=handler,
        binary=facts.get("RUNTIME_PATH", ""),
        image=options.image,
        sandbox_image=facts.get("SANDBOX_IMAGE", ""),
        env=env,
        timeout=options.timeout,
    )
    if engine == "docker":
        if not runner.which("docker"):
            return LiveResult(engine, Outcome.CANNOT_RUN, "the docker command is not installed")
        return DockerClient(runner, options.address).check(probe)
    socket = _socket(engine, root, options, runner)
    if isinstance(socket, LiveResult):
        if engine == "crio" and runner.which("podman"):
            return _podman(probe, runner)
        return socket
    if runner.which("crictl"):
        return CrictlClient(runner, socket).check(probe)
    if engine == "containerd" and runner.which("ctr"):
        return CtrClient(runner, socket).check(probe)
    if engine == "crio" and runner.which("podman"):
        return _podman(probe, runner)
    clients = "crictl nor ctr" if engine == "containerd" else "crictl nor podman"
    return LiveResult(engine, Outcome.CANNOT_RUN, f"neither {clients} is installed")


def _podman_probe(root: Path, notes: Dict[str, Any], options: LiveOptions, env: Dict[str, str]) -> Probe:
    """podman with the hooks directory we wrote to, or asking for the CDI devices (all, unless named)."""
    if notes.get("mode") == "hook":
        hook_dir = posixpath.dirname(str(notes.get("hook_file", "")))
        hooks_dir = "" if is_live_root(root) else str(rooted(root, hook_dir))
        return Probe("podman", image=options.image, hooks_dir=hooks_dir, env=env, timeout=options.timeout)
    wanted = options.visible_devices or "all"
    device = wanted if "=" in wanted else f"{KIND}={wanted}"
    return Probe("podman", image=options.image, devices=(device,), timeout=options.timeout)


def _podman(probe: Probe, runner: Runner) -> LiveResult:
    if not runner.which("podman"):
        return LiveResult(probe.engine, Outcome.CANNOT_RUN, "podman is not installed")
    return PodmanClient(runner, probe.hooks_dir).check(probe)


def _socket(engine: str, root: Path, options: LiveOptions, runner: Runner) -> Union[str, LiveResult]:
    """The engine's socket, or why there is none to use."""
    if options.address:
        address = options.address.split("://", 1)[-1]
    elif is_live_root(root):
        address = DEFAULT_SOCKETS[engine]
    else:
        return LiveResult(
            engine,
            Outcome.CANNOT_RUN,
            f"under --root {root}, pass --address with the socket of the {engine} that runs this root's configuration",
        )
    if not runner.exists(address):
        return LiveResult(
            engine,
            Outcome.CANNOT_RUN,
            f"{engine} is not running here: no socket at {address} (see --address)",
        )
    return address


def render(results: Sequence[LiveResult]) -> List[str]:
    """``ok: ...`` / ``PROBLEM: ...`` / ``CANNOT RUN: ...`` lines, one per engine."""
    return [f"{LIVE_PREFIX[r.outcome]}: {r.engine}: live: {r.detail}" for r in results]


def as_json(results: Sequence[LiveResult]) -> List[Dict[str, str]]:
    """The results for ``--json``."""
    return [
        {
            "engine": r.engine,
            "outcome": r.outcome.value,
            "client": r.client,
            "image": r.image,
            "detail": r.detail,
        }
        for r in results
    ]


def raise_for(results: Sequence[LiveResult]) -> None:
    """Exit 9 when a runtime failed; exit 1 when some engine's check could not run; else return."""
    failed = [f"{r.engine}: {r.detail}" for r in results if r.outcome is Outcome.FAILED]
    if failed:
        raise ProblemsFound(f"the live check failed for {len(failed)} engine(s)", failed)
    skipped = [f"{r.engine}: {r.detail}" for r in results if r.outcome is Outcome.CANNOT_RUN]
    if skipped:
        raise LiveCheckNotRun("the live check could not run for " + "; ".join(skipped))
