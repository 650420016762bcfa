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
so the logic here is tested with a scripted fake.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

from plumbing.fsutil import atomic_write

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
        if state in ("running", "CONTAINER_RUNNING") or (state in ("exited", "CONTAINER_EXITED") and exit_code == 0):
            return self.result(probe, Outcome.RAN, f"a container of {image} started {via}", image)
        return self.result(
            probe, Outcome.FAILED, f"the container of {image} started {via} is {state} (exit code {exit_code})", image
        )


class CrictlClient(Client):
    """A pod with the runtime handler, then a container in it (the path of ``runtimeClassName``)."""

    name = "crictl"

    def __init__(self, runner: Runner, endpoint: str) -> None:
        uri = endpoint if "://" in endpoint else f"unix://{endpoint}"
        super().__init__(runner, ["crictl", "--runtime-endpoint", uri, "--image-endpoint", uri])

    def pick_image(self, probe: Probe) -> Optional[str]:
        """``--image``, else the engine's sandbox image, else a local pause image; None when absent."""
        wanted = probe.image
        if not wanted:
            info = self.call(probe, "info", "-o", "json")
            wanted = _json_path(info.stdout, "config", "sandboxImage") if info.ok else None
        if wanted:
            return wanted if self.call(probe, "inspecti", "-o", "json", wanted).ok else None
        listed = self.call(probe, "images", "-o", "json")
        tags = [t for image in _json_path(listed.stdout, "images") or [] for t in image.get("repoTags") or []]
        return next((t for t in tags if is_pause_image(t)), None)

    def check(self, probe: Probe) -> LiveResult:
        """Run the pod and the container, then remove both."""
        version = self.call(probe, "version")
        if not version.ok:
            return self.cannot(probe, f"the CRI endpoint does not answer ({version.reason()})")
        image = self.pick_image(probe)
        if image is None:
            return self.no_image(probe)
        via = f"in a pod with runtime handler {probe.handler}" if probe.handler else "in a pod"
        with tempfile.TemporaryDirectory(prefix="gpu-airgap-live.") as tmp:
            pod_json, ctr_json = _cri_configs(Path(tmp), image, probe.env)
            handler = ["--runtime", probe.handler] if probe.handler else []
            started = self.call(probe, "runp", *handler, pod_json)
            if not started.ok:
                return self.result(probe, Outcome.FAILED, f"the engine refused a pod {via}: {started.reason()}", image)
            pod = started.stdout.split()[-1]
            result = self._container(probe, pod, pod_json, ctr_json, image, via)
            self.call(probe, "stopp", pod)
            return left_behind(result, f"the pod {pod}", self.call(probe, "rmp", pod))

    def _container(self, probe: Probe, pod: str, pod_json: str, ctr_json: str, image: str, via: str) -> LiveResult:
        created = self.call(probe, "create", "--no-pull", pod, ctr_json, pod_json)
        if not created.ok:
            return self.result(probe, Outcome.FAILED, f"a container {via} was not created: {created.reason()}", image)
        container = created.stdout.split()[-1]
        begun = self.call(probe, "start", container)
        if not begun.ok:
            return self.result(probe, Outcome.FAILED, f"a container {via} did not start: {begun.reason()}", image)
        status = _json_path(self.call(probe, "inspect", "-o", "json", container).stdout, "status") or {}
        return self.verdict(probe, image, str(status.get("state", "unknown")), int(status.get("exitCode", -1)), via)


def _cri_configs(directory: Path, image: str, env: Dict[str, str]) -> Tuple[str, str]:
    """crictl's pod and container config files (JSON, the CRI field names)."""
    name = unique_name()
    pod = {
        "metadata": {"name": name, "namespace": "gpu-airgap", "uid": name, "attempt": 0},
        "linux": {"security_context": {"namespace_options": {"network": 2}}},  # NODE: no CNI needed
    }
    container = {
        "metadata": {"name": "check"},
        "image": {"image": image},
        "envs": [{"key": key, "value": value} for key, value in sorted(env.items())],
        "linux": {},
    }
    paths = (directory / "pod.json", directory / "container.json")
    for path, data in zip(paths, (pod, container)):
        atomic_write(path, json.dumps(data, indent=2).encode(), mode=0o600)
    return str(paths[0]), str(paths[1])


class CtrClient(Client):
    """containerd without crictl: ``ctr run`` with the registered runtime's binary."""

    name = "ctr"

    def __init__(self, runner: Runner, address: str) -> None:
        super().__init__(runner, ["ctr", "--address", address])

    def pick_image(self, probe: Probe) -> Optional[Tuple[str, str]]:
        """``(namespace, image)``: ``--image`` or the sandbox image in k8s.io/default, else a pause image."""
        listed: Dict[str, List[str]] = {}
        for namespace in (CRI_NAMESPACE, "default"):
            result = self.call(probe, "--namespace", namespace, "images", "ls", "-q")
            listed[namespace] = result.stdout.split() if result.ok else []
        wanted = probe.image or probe.sandbox_image
        for namespace, refs in listed.items():
            if wanted and wanted in refs:
                return namespace, wanted
            if not wanted:
                pause = next((ref for ref in refs if is_pause_image(ref)), None)
                if pause:
                    return namespace, pause
        return None

    def check(self, probe: Probe) -> LiveResult:
        """Start the container detached, read its task status, then remove it."""
        version = self.call(probe, "version")
        if not version.ok:
            return self.cannot(probe, f"containerd does not answer ({version.reason()})")
        picked = self.pick_image(probe)
        if picked is None:
            return self.no_image(probe)
        namespace, image = picked
        name = unique_name()
        via = f"with runtime binary {probe.binary} through ctr"
        ns = ["--namespace", namespace]
        env = [arg for key, value in sorted(probe.env.items()) for arg in ("--env", f"{key}={value}")]
        binary = ["--runc-binary", probe.binary] if probe.binary else []
        result = self._run(probe, ns, [*binary, *env, image, name], via, image)
        self.call(probe, *ns, "tasks", "kill", "--signal", "SIGKILL", name)
        self.call(probe, *ns, "tasks", "delete", "--force", name)
        return left_behind(result, f"the container {name}", self.call(probe, *ns, "containers", "delete", name))

    def _run(self, probe: Probe, ns: List[str], args: List[str], via: str, image: str) -> LiveResult:
        run = self.call(probe, *ns, "run", "-d", "--null-io", *args)
        if not run.ok:
            return self.result(probe, Outcome.FAILED, f"a container {via} did not start: {run.reason()}", image)
        name = args[-1]
        state = _ctr_task_status(self.call(probe, *ns, "tasks", "ls").stdout, name)
        exit_code = 0
        if state == "STOPPED":  # `tasks delete` exits with the task's exit code
            exit_code = self.call(probe, *ns, "tasks", "delete", name).returncode
        status = {"RUNNING": "running", "STOPPED": "exited"}.get(state, state)
        result = self.verdict(probe, image, status, exit_code, via)
        if result.outcome is Outcome.RAN:  # say what this path does not prove
            return self.result(probe, Outcome.RAN, f"{result.detail} (crictl would also check the CRI handler)", image)
        return result


def _ctr_task_status(table: str, name: str) -> str:
    for line in table.splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return fields[-1]
    return "unknown"


class EngineCliClient(Client):
    """docker and podman: ``create`` + ``start`` + ``inspect`` + ``rm -f``; they differ in options only."""

    def image_present(self, probe: Probe, image: str) -> bool:
        """True when the engine has ``image`` locally."""
        raise NotImplementedError

    def pick_image(self, probe: Probe) -> Optional[str]:
        """``--image`` when present, else a local pause image."""
        if probe.image:
            return probe.image if self.image_present(probe, probe.image) else None
        listed = self.call(probe, "images", "--format", "{{.Repository}}:{{.Tag}}")
        return next((ref for ref in listed.stdout.split() if listed.ok and is_pause_image(ref)), None)

    def create_options(self, probe: Probe) -> List[str]:
        """Engine-specific options of ``create`` (runtime, hooks)."""
        raise NotImplementedError

    def reachable(self, probe: Probe) -> Optional[LiveResult]:
        """None when the engine answers, else a CANNOT_RUN or FAILED result."""
        raise NotImplementedError

    def check(self, probe: Probe) -> LiveResult:
        """Create, start, inspect, remove."""
        problem = self.reachable(probe)
        if problem is not None:
            return problem
        image = self.pick_image(probe)
        if image is None:
            return self.no_image(probe)
        via = self.via(probe)
        env = [arg for key, value in sorted(probe.env.items()) for arg in ("--env", f"{key}={value}")]
        created = self.call(probe, "create", "--pull", "never", "--network", "none", *self.create_options(probe), *env, image)
        if not created.ok:
            return self.result(probe, Outcome.FAILED, f"a container {via} was not created: {created.reason()}", image)
        container = created.stdout.split()[-1]
        result = self._start(probe, container, image, via)
        self.call(probe, "kill", container)  # SIGKILL: rm --force alone may wait for a graceful stop
        return left_behind(result, f"the container {container}", self.call(probe, "rm", "--force", container))

    def _start(self, probe: Probe, container: str, image: str, via: str) -> LiveResult:
        begun = self.call(probe, "start", container)
        if not begun.ok:
            return self.result(probe, Outcome.FAILED, f"a container {via} did not start: {begun.reason()}", image)
        state = self.call(probe, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container)
        status, _, code = state.stdout.strip().partition(" ")
        return self.verdict(probe, image, status or "unknown", int(code) if code.lstrip("-").isdigit() else -1, via)

    def via(self, probe: Probe) -> str:
        """How the container went, for the sentence."""
        raise NotImplementedError


class DockerClient(EngineCliClient):
    """dockerd: the runtime must be loaded (``docker info``) and ``--runtime NAME`` must start a container."""

    name = "docker"

    def __init__(self, runner: Runner, host: Optional[str]) -> None:
        uri = host if not host or "://" in host else f"unix://{host}"
        super().__init__(runner, ["docker", *(["--host", uri] if uri else [])])

    def reachable(self, probe: Probe) -> Optional[LiveResult]:
        """dockerd answers and lists the runtime."""
        info = self.call(probe, "info", "--format", "{{json .Runtimes}}")
        if not info.ok:
            return self.cannot(probe, f"dockerd does not answer ({info.reason()})")
        runtimes = _json_path(info.stdout) or {}
        if probe.handler and probe.handler not in runtimes:
            return self.result(
                probe, Outcome.FAILED,
                f"dockerd has not loaded the runtime {probe.handler} (it has {', '.join(sorted(runtimes)) or 'none'}); restart dockerd",
            )  # fmt: skip
        return None

    def image_present(self, probe: Probe, image: str) -> bool:
        """``docker image inspect``."""
        return self.call(probe, "image", "inspect", image).ok

    def create_options(self, probe: Probe) -> List[str]:
        """``--runtime NAME``."""
        return ["--runtime", probe.handler] if probe.handler else []

    def via(self, probe: Probe) -> str:
        """Through the named runtime."""
        return f"with --runtime {probe.handler}"


class PodmanClient(EngineCliClient):
    """podman: CRI-O's OCI hook (``--hooks-dir``) or its runtime binary (``--runtime``)."""

    name = "podman"

    def __init__(self, runner: Runner, hooks_dir: str = "") -> None:
        super().__init__(runner, ["podman", *(["--hooks-dir", hooks_dir] if hooks_dir else [])])

    def reachable(self, probe: Probe) -> Optional[LiveResult]:
        """podman has no daemon: nothing to reach."""
        return None

    def image_present(self, probe: Probe, image: str) -> bool:
        """``podman image exists``."""
        return self.call(probe, "image", "exists", image).ok

    def create_options(self, probe: Probe) -> List[str]:
        """``--runtime BINARY`` when checking a runtime entry, ``--device NAME`` for CDI; nothing for the hook."""
        devices = [arg for device in probe.devices for arg in ("--device", device)]
        return [*(["--runtime", probe.binary] if probe.binary else []), *devices]

    def via(self, probe: Probe) -> str:
        """Through the hook, the CDI devices or the binary."""
        if probe.devices:
            return f"with the CDI device {', '.join(probe.devices)}"
        return f"with --runtime {probe.binary}" if probe.binary else "with the OCI hook"


def left_behind(result: LiveResult, what: str, removal: Completed) -> LiveResult:
    """``result``, saying so when the throwaway container or pod could not be removed."""
    if removal.ok:
        return result
    return replace(result, detail=f"{result.detail}; {what} could not be removed ({removal.reason()})")


def _json_path(text: str, *keys: str) -> Any:
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
