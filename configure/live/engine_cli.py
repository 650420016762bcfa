"""The engine command-line clients of ``configure verify --live``: docker and podman."""

from __future__ import annotations

from typing import List, Optional

from configure.live.clients import (
    Client,
    LiveResult,
    Outcome,
    Probe,
    Runner,
    is_pause_image,
    json_path,
    left_behind,
)


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
        env = probe.env_options()
        created = self.call(
            probe, "create", "--pull", "never", "--network", "none", *self.create_options(probe), *env, image
        )
        if not created.ok:
            return self.result(
                probe, Outcome.FAILED, f"a container {via} was not created: {created.reason()}", image
            )
        container = created.stdout.split()[-1]
        result = self._start(probe, container, image, via)
        self.call(probe, "kill", container)  # SIGKILL: rm --force alone may wait for a graceful stop
        return left_behind(result, f"the container {container}", self.call(probe, "rm", "--force", container))

    def _start(self, probe: Probe, container: str, image: str, via: str) -> LiveResult:
        begun = self.call(probe, "start", container)
        if not begun.ok:
            return self.result(
                probe, Outcome.FAILED, f"a container {via} did not start: {begun.reason()}", image
            )
        state = self.call(probe, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container)
        status, _, code = state.stdout.strip().partition(" ")
        return self.verdict(
            probe, image, status or "unknown", int(code) if code.lstrip("-").isdigit() else -1, via
        )

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
        runtimes = json_path(info.stdout) or {}
        if probe.handler and probe.handler not in runtimes:
            return self.result(
                probe,
                Outcome.FAILED,
                f"dockerd has not loaded the runtime {probe.handler} (it has {', '.join(sorted(runtimes)) or 'none'}); restart dockerd",
            )
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
