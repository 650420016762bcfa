"""The CRI clients of ``configure verify --live``: crictl (a pod with the runtime handler) and ctr."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from configure.live.clients import (
    CRI_NAMESPACE,
    Client,
    LiveResult,
    Outcome,
    Probe,
    Runner,
    is_pause_image,
    json_path,
    left_behind,
    unique_name,
)
from plumbing.fsutil import atomic_write


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
            wanted = json_path(info.stdout, "config", "sandboxImage") if info.ok else None
        if wanted:
            return wanted if self.call(probe, "inspecti", "-o", "json", wanted).ok else None
        listed = self.call(probe, "images", "-o", "json")
        tags = [t for image in json_path(listed.stdout, "images") or [] for t in image.get("repoTags") or []]
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
                return self.result(
                    probe, Outcome.FAILED, f"the engine refused a pod {via}: {started.reason()}", image
                )
            pod = started.stdout.split()[-1]
            result = self._container(probe, pod, pod_json, ctr_json, image, via)
            self.call(probe, "stopp", pod)
            return left_behind(result, f"the pod {pod}", self.call(probe, "rmp", pod))

    def _container(
        self, probe: Probe, pod: str, pod_json: str, ctr_json: str, image: str, via: str
    ) -> LiveResult:
        created = self.call(probe, "create", "--no-pull", pod, ctr_json, pod_json)
        if not created.ok:
            return self.result(
                probe, Outcome.FAILED, f"a container {via} was not created: {created.reason()}", image
            )
        container = created.stdout.split()[-1]
        begun = self.call(probe, "start", container)
        if not begun.ok:
            return self.result(
                probe, Outcome.FAILED, f"a container {via} did not start: {begun.reason()}", image
            )
        status = json_path(self.call(probe, "inspect", "-o", "json", container).stdout, "status") or {}
        return self.verdict(
            probe, image, str(status.get("state", "unknown")), int(status.get("exitCode", -1)), via
        )


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
        env = probe.env_options()
        binary = ["--runc-binary", probe.binary] if probe.binary else []
        result = self._run(probe, ns, [*binary, *env, image, name], via, image)
        self.call(probe, *ns, "tasks", "kill", "--signal", "SIGKILL", name)
        self.call(probe, *ns, "tasks", "delete", "--force", name)
        return left_behind(
            result, f"the container {name}", self.call(probe, *ns, "containers", "delete", name)
        )

    def _run(self, probe: Probe, ns: List[str], args: List[str], via: str, image: str) -> LiveResult:
        run = self.call(probe, *ns, "run", "-d", "--null-io", *args)
        if not run.ok:
            return self.result(
                probe, Outcome.FAILED, f"a container {via} did not start: {run.reason()}", image
            )
        name = args[-1]
        state = _ctr_task_status(self.call(probe, *ns, "tasks", "ls").stdout, name)
        exit_code = 0
        if state == "STOPPED":  # `tasks delete` exits with the task's exit code
            exit_code = self.call(probe, *ns, "tasks", "delete", name).returncode
        status = {"RUNNING": "running", "STOPPED": "exited"}.get(state, state)
        result = self.verdict(probe, image, status, exit_code, via)
        if result.outcome is Outcome.RAN:  # say what this path does not prove
            return self.result(
                probe, Outcome.RAN, f"{result.detail} (crictl would also check the CRI handler)", image
            )
        return result


def _ctr_task_status(table: str, name: str) -> str:
    for line in table.splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return fields[-1]
    return "unknown"
