"""A CRI client for the live tests, from the CRI API that Debian's containerd is built with.

Debian 12 has no crictl. The CRI ``api.proto`` ships in Debian's containerd *source* package
(``vendor/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto``); :func:`cri_modules` fetches that package
once with ``apt-get source --download-only`` through a private apt configuration (its own
sources.list with a ``deb-src`` line, lists and archives under the cache; the host's apt
configuration is never changed; apt checks the files against the signed Sources index), drops the
gogoproto lines (Go-only options) and generates Python stubs with grpcio-tools. The stubs are
cached per containerd version and grpcio-tools version.

:class:`CriClient` runs a pod sandbox with a runtime handler and one container in it, in the host's
network namespace (``NamespaceOption.network = NODE``), so no CNI plugin is needed.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

from tests.live.cache import cache_root, cached_dir, digest

DEBIAN_MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
PROTO_MEMBER = "vendor/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
MODULE = "cri_api_v1"


def _installed_version(package: str) -> str:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else ""


def _apt(apt_dir: Path, *args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess[str]:
    """apt-get with a private configuration: only our deb-src lines, our lists, our archives."""
    options = [
        f"-oDir::Etc::SourceList={apt_dir}/sources.list",
        f"-oDir::Etc::SourceParts={apt_dir}/sources.list.d",
        f"-oDir::State::Lists={apt_dir}/lists",
        f"-oDir::Cache={apt_dir}/cache",
        "-oAPT::Sandbox::User=root",  # the private dirs are root's; _apt could not write them
        "-qq",
    ]
    return subprocess.run(
        ["apt-get", *options, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def fetch_cri_proto(dest: Path, version: str) -> str:
    """Write the CRI v1 ``api.proto`` of containerd ``version`` (or the newest) to ``dest``; return its version."""
    apt_dir = cache_root() / "apt-src"
    for sub in ("sources.list.d", "lists/partial", "cache/archives/partial"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    codename = "bookworm"
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    (apt_dir / "sources.list").write_text(
        f"deb-src [signed-by={keyring}] {DEBIAN_MIRROR} {codename} main\n"
        f"deb-src [signed-by={keyring}] {DEBIAN_MIRROR} {codename}-updates main\n"
        f"deb-src [signed-by={keyring}] {SECURITY_MIRROR} {codename}-security main\n"
    )
    updated = _apt(apt_dir, "update")
    if updated.returncode != 0:
        raise RuntimeError(f"apt-get update (deb-src) failed: {updated.stderr.strip()[-1000:]}")
    work = dest.parent / "source"
    work.mkdir(parents=True, exist_ok=True)
    fetched = _apt(apt_dir, "source", "--download-only", f"containerd={version}", cwd=work)
    if fetched.returncode != 0:  # that exact version is gone from the archive: take the current one
        fetched = _apt(apt_dir, "source", "--download-only", "containerd", cwd=work)
    if fetched.returncode != 0:
        raise RuntimeError(f"apt-get source containerd failed: {fetched.stderr.strip()[-1000:]}")
    dsc = next(work.glob("containerd_*.dsc"))
    source_version = dsc.name[len("containerd_") : -len(".dsc")]
    orig = next(work.glob("containerd_*.orig.tar.*"))
    with tarfile.open(orig) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/" + PROTO_MEMBER))
        handle = tar.extractfile(member)
        assert handle is not None
        text = handle.read().decode()
    # gogoproto options only steer Go code generation; protoc cannot resolve their import.
    dest.write_text("".join(line for line in text.splitlines(True) if "gogoproto" not in line))
    for leftover in work.iterdir():
        leftover.unlink()
    work.rmdir()
    return source_version


def _generate(out: Path, version: str) -> None:
    proto_dir = out / "proto"
    proto_dir.mkdir()
    source_version = fetch_cri_proto(proto_dir / f"{MODULE}.proto", version)
    generated = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_dir}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(proto_dir / f"{MODULE}.proto"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if generated.returncode != 0:
        raise RuntimeError(f"grpc_tools.protoc failed: {generated.stderr.strip()[-2000:]}")
    (out / "SOURCE_VERSION").write_text(source_version + "\n")


def cri_modules() -> tuple[ModuleType, ModuleType]:
    """The generated ``(api_pb2, api_pb2_grpc)`` modules, built once per containerd and grpcio-tools version."""
    from importlib.metadata import version as dist_version

    containerd = _installed_version("containerd")
    key = digest(containerd, dist_version("grpcio-tools"), dist_version("protobuf"))
    stubs = cached_dir("cri-stubs", key, lambda scratch: _generate(scratch, containerd))
    if str(stubs) not in sys.path:
        sys.path.insert(0, str(stubs))  # the grpc module imports its pb2 module by top-level name
    return importlib.import_module(f"{MODULE}_pb2"), importlib.import_module(f"{MODULE}_pb2_grpc")


@dataclass(frozen=True)
class ContainerRun:
    """How one container ended: its CRI state name, exit code and log."""

    container_id: str
    state: str
    exit_code: int
    log: str


class CriError(Exception):
    """A CRI call failed; ``str()`` is containerd's message."""


class CriClient:
    """RuntimeService calls over containerd's socket, shaped for the tests."""

    def __init__(
        self, socket: Path, log_dir: Path, cgroup_parent: str, node_root: Optional[Path] = None
    ) -> None:
        """``node_root``: containerd runs in another root (a booted node) where ``log_dir`` is; the test reads it there."""
        import grpc

        self.pb, rpc = cri_modules()
        self._grpc = grpc
        self._channel = grpc.insecure_channel(f"unix://{socket}")
        self.runtime: Any = rpc.RuntimeServiceStub(self._channel)
        self.log_dir = log_dir
        self.cgroup_parent = cgroup_parent
        self.node_root = node_root
        self._seen(log_dir).mkdir(parents=True, exist_ok=True)

    def _seen(self, path: Path) -> Path:
        """Where containerd's ``path`` is for the test."""
        return self.node_root / path.relative_to("/") if self.node_root is not None else path

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def _call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self.runtime, method)(request, timeout=60)
        except self._grpc.RpcError as exc:
            raise CriError(exc.details()) from exc

    def pod_config(self, name: str) -> Any:
        """A sandbox in the node's network namespace, under the tests' own cgroup parent."""
        pb = self.pb
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, namespace="gpu-airgap-tests", uid=str(uuid.uuid4())),
            log_directory=str(self.log_dir / name),
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=self.cgroup_parent,
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.NODE)
                ),
            ),
        )

    def run_pod(self, handler: str, name: Optional[str] = None) -> tuple[str, Any]:
        """RunPodSandbox with ``runtime_handler=handler``; returns ``(pod id, its config)``.

        :raises CriError: when containerd refuses (e.g. no runtime for the handler).
        """
        config = self.pod_config(name or f"pod-{uuid.uuid4().hex[:8]}")
        self._seen(self.log_dir / config.metadata.name).mkdir(parents=True, exist_ok=True)
        reply = self._call(
            "RunPodSandbox", self.pb.RunPodSandboxRequest(config=config, runtime_handler=handler)
        )
        return reply.pod_sandbox_id, config

    def run_container(
        self,
        pod_id: str,
        pod_config: Any,
        image: str,
        command: list[str],
        env: Optional[dict[str, str]] = None,
        timeout: float = 30,
    ) -> ContainerRun:
        """Create and start a container in the pod, wait for it to exit, and return its state and log."""
        pb = self.pb
        name = f"c-{uuid.uuid4().hex[:8]}"
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name),
            image=pb.ImageSpec(image=image),
            command=command,
            envs=[pb.KeyValue(key=k, value=v) for k, v in (env or {}).items()],
            log_path=f"{name}.log",
        )
        created = self._call(
            "CreateContainer",
            pb.CreateContainerRequest(pod_sandbox_id=pod_id, config=config, sandbox_config=pod_config),
        )
        container_id = created.container_id
        self._call("StartContainer", pb.StartContainerRequest(container_id=container_id))
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            status = self._call(
                "ContainerStatus", pb.ContainerStatusRequest(container_id=container_id)
            ).status
            if status.state == pb.CONTAINER_EXITED:
                break
            time.sleep(0.1)
        assert status is not None
        log_file = self._seen(Path(pod_config.log_directory) / config.log_path)
        log = log_file.read_text() if log_file.exists() else ""
        return ContainerRun(
            container_id, pb.ContainerState.Name(status.state), status.exit_code, _log_lines(log)
        )

    def runtime_handlers(self) -> set[str]:
        """The runtime handlers the running daemon's CRI plugin loaded (``Status`` with ``verbose``)."""
        reply = self._call("Status", self.pb.StatusRequest(verbose=True))
        config = json.loads(reply.info["config"])
        return set(config["containerd"]["runtimes"])

    def pod_state(self, pod_id: str) -> str:
        """The pod's CRI state name (``SANDBOX_READY``...)."""
        status = self._call("PodSandboxStatus", self.pb.PodSandboxStatusRequest(pod_sandbox_id=pod_id)).status
        return str(self.pb.PodSandboxState.Name(status.state))

    def remove_pod(self, pod_id: str) -> None:
        """Stop and remove the pod and its containers."""
        self._call("StopPodSandbox", self.pb.StopPodSandboxRequest(pod_sandbox_id=pod_id))
        self._call("RemovePodSandbox", self.pb.RemovePodSandboxRequest(pod_sandbox_id=pod_id))

    def remove_all_pods(self) -> None:
        """Remove every pod this daemon has (cleanup before it stops)."""
        for pod in self._call("ListPodSandbox", self.pb.ListPodSandboxRequest()).items:
            self.remove_pod(pod.id)


def _log_lines(cri_log: str) -> str:
    """The container's output from a CRI log file (``<time> <stream> <tag> <text>`` per line)."""
    return "".join(line.split(" ", 3)[3] + "\n" for line in cri_log.splitlines() if line.count(" ") >= 3)
