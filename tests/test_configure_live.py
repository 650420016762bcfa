"""``configure verify --live``'s logic with a scripted runner: which client, which commands, which verdict.

The real run against containerd, dockerd and podman is in ``tests/live/test_verify_live.py``; crictl
is only exercised here (Debian 12 does not package it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

import pytest

from configure import live
from configure.live.clients import Completed, Outcome, is_pause_image
from plumbing.errors import ExitCode, ProblemsFound, UsageError
from tests.cli_runner import run_cli
from tests.containerd_helpers import make_root

SOCKET = "/run/containerd/containerd.sock"
Reply = Union[Completed, Callable[[List[str]], Completed]]
PAUSE = "registry.k8s.io/pause:3.9"


class FakeRunner:
    """Replies by the first script entry whose words appear in the command; records every call and config file."""

    def __init__(
        self,
        script: Sequence[Tuple[str, Reply]] = (),
        programs: Sequence[str] = ("crictl", "ctr", "docker", "podman"),
        sockets: Sequence[str] = (SOCKET,),
    ) -> None:
        self.script = list(script)
        self.programs = set(programs)
        self.sockets = set(sockets)
        self.calls: List[List[str]] = []
        self.files: Dict[str, object] = {}

    def run(self, argv: Sequence[str], timeout: float) -> Completed:
        self.calls.append(list(argv))
        for arg in argv:
            if arg.endswith(".json") and Path(arg).is_file():
                self.files[Path(arg).name] = json.loads(Path(arg).read_text())
        reply = next(
            (reply for pattern, reply in self.script if _contains(argv, pattern.split())), Completed(0)
        )
        return reply(list(argv)) if callable(reply) else reply

    def which(self, name: str) -> Optional[str]:
        return f"/usr/bin/{name}" if name in self.programs else None

    def exists(self, path: str) -> bool:
        return path in self.sockets

    def ran(self, *words: str) -> List[List[str]]:
        """The calls that contain every one of ``words``."""
        return [call for call in self.calls if all(w in call for w in words)]


def _contains(argv: Sequence[str], words: List[str]) -> bool:
    """``words`` appear in ``argv`` as consecutive arguments."""
    return any(list(argv[i : i + len(words)]) == words for i in range(len(argv) - len(words) + 1))


@pytest.fixture
def containerd_root(tmp_path: Path) -> Path:
    make_root(tmp_path, "config.toml.base")
    assert run_cli("configure", "containerd", "--root", str(tmp_path)).exit_code == 0
    return tmp_path


def check(root: Path, runner: FakeRunner, engine: str = "containerd", **options: object) -> live.LiveResult:
    options.setdefault("address", SOCKET)
    return live.check_engine(engine, root, live.LiveOptions(**options), runner)  # type: ignore[arg-type]


def test_crictl_runs_a_pod_with_the_runtimeclass_handler_in_the_node_network_and_removes_it(
    containerd_root: Path,
) -> None:
    assert (
        run_cli("configure", "runtimeclass", "--root", str(containerd_root), "--handler", "nvidia").exit_code
        == 0
    )
    runner = FakeRunner(
        [
            ("info -o json", Completed(0, json.dumps({"config": {"sandboxImage": PAUSE}}))),
            ("runp", Completed(0, "pod-1\n")),
            ("create --no-pull", Completed(0, "ctr-1\n")),
            (
                "inspect -o json ctr-1",
                Completed(0, json.dumps({"status": {"state": "CONTAINER_RUNNING", "exitCode": 0}})),
            ),
        ]
    )
    result = check(containerd_root, runner, visible_devices="nvidia.com/gpu=all")
    assert result.outcome is Outcome.RAN and result.client == "crictl" and result.image == PAUSE
    assert "runtime handler nvidia" in result.detail
    (runp,) = runner.ran("runp")
    assert runp[runp.index("--runtime") + 1] == "nvidia" and f"unix://{SOCKET}" in runp
    assert runner.files["pod.json"]["linux"]["security_context"]["namespace_options"]["network"] == 2  # type: ignore[index]
    assert runner.files["container.json"]["envs"] == [
        {"key": "NVIDIA_VISIBLE_DEVICES", "value": "nvidia.com/gpu=all"}
    ]  # type: ignore[index]
    assert runner.ran("stopp", "pod-1") and runner.ran("rmp", "pod-1")
    assert not runner.ran("ctr")  # crictl wins when both are there


def test_a_handler_the_engine_refuses_is_a_problem_and_exits_9(containerd_root: Path) -> None:
    runner = FakeRunner(
        [
            ("info -o json", Completed(0, json.dumps({"config": {"sandboxImage": PAUSE}}))),
            (
                "runp",
                Completed(
                    1, "", 'E1201 ... run pod sandbox: rpc error: no runtime for "nvidia" is configured\n'
                ),
            ),
        ]
    )
    result = check(containerd_root, runner)
    assert result.outcome is Outcome.FAILED and 'no runtime for "nvidia" is configured' in result.detail
    assert not runner.ran("create")
    with pytest.raises(ProblemsFound) as raised:
        live.raise_for([result])
    assert raised.value.exit_code == ExitCode.PROBLEMS_FOUND


def test_without_crictl_ctr_runs_the_configured_binary_on_the_sandbox_image_and_cleans_up(
    containerd_root: Path,
) -> None:
    def tasks(status: str) -> Reply:
        return lambda _argv: Completed(0, f"TASK PID STATUS\n{runner.ran('run', '-d')[-1][-1]} 42 {status}\n")

    runner = FakeRunner([("images ls -q", Completed(0, f"{PAUSE}\nsha256:abc\n"))], programs=("ctr",))
    runner.script.append(("tasks ls", tasks("RUNNING")))
    result = check(containerd_root, runner)
    assert result.outcome is Outcome.RAN and result.client == "ctr" and result.image == PAUSE
    (run,) = runner.ran("run", "-d", "--null-io")
    name = run[-1]
    assert run[run.index("--runc-binary") + 1] == "/usr/bin/nvidia-container-runtime"
    assert run[-2] == PAUSE and run[run.index("--namespace") + 1] == "k8s.io"  # the CRI sandbox image
    assert runner.ran("tasks", "delete", "--force", name) and runner.ran("containers", "delete", name)

    runner = FakeRunner(
        [("images ls -q", Completed(0, f"{PAUSE}\n")), ("tasks delete", Completed(3))], programs=("ctr",)
    )
    runner.script.insert(0, ("tasks ls", tasks("STOPPED")))
    stopped = check(containerd_root, runner)
    assert stopped.outcome is Outcome.FAILED and "is exited (exit code 3)" in stopped.detail


@pytest.mark.parametrize(
    ("programs", "sockets", "address", "said"),
    [
        ((), (SOCKET,), None, "neither crictl nor ctr is installed"),
        (("crictl",), (), None, f"no socket at {SOCKET}"),
        (
            ("crictl",),
            (),
            "/run/k3s/containerd/containerd.sock",
            "no socket at /run/k3s/containerd/containerd.sock",
        ),
    ],
)
def test_no_client_or_no_engine_cannot_run_and_nothing_is_tried(
    containerd_root: Path,
    programs: Tuple[str, ...],
    sockets: Tuple[str, ...],
    address: Optional[str],
    said: str,
) -> None:
    runner = FakeRunner(programs=programs, sockets=sockets)
    result = check(containerd_root, runner, address=address or SOCKET)
    assert result.outcome is Outcome.CANNOT_RUN and said in result.detail
    assert runner.calls == []
    with pytest.raises(live.LiveCheckNotRun) as raised:
        live.raise_for([result])
    assert raised.value.exit_code == ExitCode.ERROR


def test_under_another_root_without_address_it_says_which_socket_to_name(containerd_root: Path) -> None:
    runner = FakeRunner()
    result = live.check_engine("containerd", containerd_root, live.LiveOptions(), runner)
    assert result.outcome is Outcome.CANNOT_RUN and "pass --address" in result.detail
    assert runner.calls == []


def test_an_image_that_is_not_on_the_node_is_never_pulled(containerd_root: Path) -> None:
    runner = FakeRunner([("inspecti", Completed(1, "", "no such image"))])
    result = check(containerd_root, runner, image="registry.internal/cuda:12")
    assert result.outcome is Outcome.CANNOT_RUN
    assert "registry.internal/cuda:12 is not on the node (it is never pulled)" in result.detail
    assert not runner.ran("runp") and not any("pull" in call for call in runner.calls)


def test_docker_with_the_runtime_not_loaded_yet_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "etc/docker").mkdir(parents=True)
    (tmp_path / "etc/docker/daemon.json").write_text("{}\n")
    assert run_cli("configure", "docker", "--root", str(tmp_path)).exit_code == 0
    runner = FakeRunner([("info --format", Completed(0, json.dumps({"runc": {"path": "runc"}})))])
    result = check(tmp_path, runner, engine="docker", address="/tmp/d.sock", image="busybox:1.36")
    assert (
        result.outcome is Outcome.FAILED
        and "dockerd has not loaded the runtime nvidia (it has runc)" in result.detail
    )
    assert runner.calls[0][:3] == ["docker", "--host", "unix:///tmp/d.sock"] and not runner.ran("create")

    runner = FakeRunner(
        [
            (
                "info --format",
                Completed(0, json.dumps({"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}})),
            ),
            ("create", Completed(0, "c0ffee\n")),
            ("inspect --format", Completed(0, "exited 0\n")),
        ]
    )
    result = check(tmp_path, runner, engine="docker", address="/tmp/d.sock", image="busybox:1.36")
    assert result.outcome is Outcome.RAN
    (create,) = runner.ran("create")
    assert create[create.index("--runtime") + 1] == "nvidia" and create[create.index("--pull") + 1] == "never"
    assert runner.ran("rm", "--force", "c0ffee")


def test_a_container_that_cannot_be_removed_is_named_in_the_result(tmp_path: Path) -> None:
    assert run_cli("configure", "crio", "--hook", "--root", str(tmp_path)).exit_code == 0
    runner = FakeRunner(
        [
            ("create", Completed(0, "abc\n")),
            ("inspect", Completed(0, "running 0\n")),
            ("rm", Completed(125, "", "Error: cannot remove container abc: device or resource busy\n")),
        ]
    )
    result = live.check_engine("crio", tmp_path, live.LiveOptions(image="busybox:1.36"), runner)
    assert result.outcome is Outcome.RAN
    assert result.detail.endswith(
        "; the container abc could not be removed (Error: cannot remove container abc: device or resource busy)"
    )
    assert runner.ran("kill", "abc")  # killed first, so removing never waits for a graceful stop


def test_podman_checks_crio_hook_mode_with_the_hooks_dir_gpu_airgap_wrote(tmp_path: Path) -> None:
    assert run_cli("configure", "crio", "--hook", "--root", str(tmp_path)).exit_code == 0
    runner = FakeRunner([("create", Completed(0, "abc\n")), ("inspect", Completed(0, "running 0\n"))])
    result = live.check_engine("crio", tmp_path, live.LiveOptions(image="busybox:1.36"), runner)
    assert (
        result.outcome is Outcome.RAN and result.client == "podman" and "with the OCI hook" in result.detail
    )
    assert runner.calls[0][:3] == [
        "podman",
        "--hooks-dir",
        str(tmp_path / "usr/share/containers/oci/hooks.d"),
    ]
    (create,) = runner.ran("create")
    assert "--runtime" not in create


def test_start_failure_names_the_runtime_error(tmp_path: Path) -> None:
    assert run_cli("configure", "crio", "--hook", "--root", str(tmp_path)).exit_code == 0
    error = "Error: OCI runtime error: runc: error running hook #0: exit status 1\n"
    runner = FakeRunner([("create", Completed(0, "abc\n")), ("start", Completed(126, "", error))])
    result = live.check_engine("crio", tmp_path, live.LiveOptions(image="busybox:1.36"), runner)
    assert result.outcome is Outcome.FAILED and "error running hook #0" in result.detail
    assert runner.ran("rm", "--force", "abc")


def test_address_with_two_engines_is_a_usage_error(containerd_root: Path) -> None:
    (containerd_root / "etc/docker").mkdir(parents=True)
    (containerd_root / "etc/docker/daemon.json").write_text("{}\n")
    assert run_cli("configure", "docker", "--root", str(containerd_root)).exit_code == 0
    with pytest.raises(UsageError):
        live.live_check(containerd_root, None, live.LiveOptions(address=SOCKET), FakeRunner())


def test_live_options_without_live_are_a_usage_error(containerd_root: Path) -> None:
    result = run_cli("configure", "verify", "--root", str(containerd_root), "--image", "x")
    assert result.exit_code == ExitCode.USAGE and "belong to --live" in result.stderr


def test_static_problems_stop_the_check_before_any_container(containerd_root: Path) -> None:
    # the runtime binary is missing under the root: exit 9 from the static checks, no live line
    result = run_cli(
        "configure", "verify", "--root", str(containerd_root), "--live", "--address", "/nonexistent.sock"
    )
    assert result.exit_code == ExitCode.PROBLEMS_FOUND
    assert "live:" not in result.stdout


def test_cli_says_cannot_run_with_exit_1_and_lists_the_static_checks_first(containerd_root: Path) -> None:
    (containerd_root / "usr/bin").mkdir(parents=True)
    (containerd_root / "usr/bin/nvidia-container-runtime").write_text("#!/bin/sh\n")
    result = run_cli(
        "configure", "verify", "--root", str(containerd_root), "--live", "--address", "/nonexistent.sock"
    )
    assert result.exit_code == ExitCode.ERROR
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ok: containerd: runtime nvidia is registered")
    assert (
        lines[-1]
        == "CANNOT RUN: containerd: live: containerd is not running here: no socket at /nonexistent.sock (see --address)"
    )
    assert "the live check could not run for containerd" in result.stderr
    as_json = json.loads(
        run_cli(
            "configure",
            "verify",
            "--root",
            str(containerd_root),
            "--live",
            "--json",
            "--address",
            "/nonexistent.sock",
        ).stdout
    )
    assert as_json["ok"] is False and as_json["live"][0]["outcome"] == "cannot-run"


@pytest.mark.parametrize(
    ("ref", "pause"),
    [
        (PAUSE, True),
        ("pause:3.6", True),
        ("localhost:5000/pause", True),
        ("registry.internal/k8s/pause@sha256:ab", True),
        ("busybox:1.36", False),
        ("registry.internal/pause-helper:1", False),
        ("localhost:5000/busybox", False),
    ],
)
def test_pause_images_are_recognised_by_their_repository_name(ref: str, pause: bool) -> None:
    assert is_pause_image(ref) is pause
