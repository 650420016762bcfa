"""Issue 9: ``gpu-airgap fleet k8s`` writes a DaemonSet (plus RuntimeClass) that installs the bundle on GPU nodes.

The manifests are validated offline against the official Kubernetes JSON schemas bundled with
``kubernetes-validate`` (strict: unknown fields fail) for three Kubernetes versions, and a broken
manifest is shown to fail, so the validator is known to run. The pod's program
(``mirror/fleet/data/k8s-node.py``) is run for real outside Kubernetes: with a scratch root as the host's
/ and the bundle served on 127.0.0.1, it installs, and its readiness check passes.
"""

from __future__ import annotations

import copy
import functools
import http.server
import importlib.util
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Dict, List

import kubernetes_validate
import pytest
import yaml

from configure import runtimeclass
from installer.nodecheck import NODE_SUMS, NODE_SUMS_SIGNATURE, NODE_TOOL
from mirror.fleet import k8s as fleet_k8s
from mirror.fleet.cli import pod_script
from plumbing.errors import ExitCode
from tests import bundle_tamper as tamper
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import TOOLKIT, node_python, seed_containerd_node, seed_dpkg_root, tree_digest

K8S_VERSIONS = ("1.29", "1.32", "1.37")
SHA = "ab" * 32  #: a bundle's sha256 (--bundle-sha256)
#: a bundle by URL or by ConfigMap, with its digest and the key's ConfigMap: each refusal below adds one bad option
BY_URL = ["--bundle-url", "http://x/b", "--bundle-sha256", SHA, "--keyring-configmap", "k"]
BY_CONFIGMAP = ["--bundle-configmap", "b", "--bundle-sha256", SHA, "--keyring-configmap", "k"]


def _render(*args: str) -> List[Dict[str, Any]]:
    result = run_cli("fleet", "k8s", *args)
    assert result.exit_code == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def url_docs(operator_key: TestKey) -> List[Dict[str, Any]]:
    return _render(
        "--bundle-url",
        "https://mirror.internal/nvct-1.17.8.tar.zst",
        "--bundle-sha256",
        SHA,
        "--keyring",
        str(operator_key.public),
        "--runtime",
        "containerd",
        "--toleration",
        "dedicated=gpu:NoExecute",
        "--node-selector",
        "gpu=true",
    )


@pytest.fixture(scope="module")
def configmap_docs() -> List[Dict[str, Any]]:
    return _render(
        "--bundle-configmap",
        "nvct-bundle",
        "--bundle-sha256",
        SHA,
        "--keyring-configmap",
        "operator-key",
        "--namespace",
        "kube-gpu",
        "--runtime-name",
        "nvidia-cdi",
        "--cdi",
        "on",
        "--set-as-default",
        "--hold",
    )


@pytest.fixture(scope="module")
def image_docs() -> List[Dict[str, Any]]:
    return _render(
        "--tools",
        "image",
        "--bundle-configmap",
        "nvct-bundle",
        "--bundle-sha256",
        SHA,
        "--keyring-configmap",
        "operator-key",
        "--image",
        "registry.internal/gpu-airgap-node:1",
    )


def _by_kind(docs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schemas(
    version: str,
    url_docs: List[Dict[str, Any]],
    configmap_docs: List[Dict[str, Any]],
    image_docs: List[Dict[str, Any]],
) -> None:
    kinds = set()
    for doc in [*url_docs, *configmap_docs, *image_docs]:
        kubernetes_validate.validate(doc, version, strict=True)  # raises on any schema violation
        kinds.add(doc["kind"])
    assert kinds == {"Namespace", "ConfigMap", "DaemonSet", "RuntimeClass"}


@pytest.mark.parametrize(
    "breakage",
    [
        lambda ds: ds["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
            privileged="yes"
        ),
        lambda ds: ds["spec"]["template"]["spec"].update(
            hostPid=True
        ),  # misspelt: strict schemas refuse unknown fields
        lambda ds: ds["spec"].pop("selector"),
    ],
    ids=["wrong-type", "unknown-field", "missing-required"],
)
def test_the_validator_rejects_a_broken_daemonset(breakage: Any, url_docs: List[Dict[str, Any]]) -> None:
    daemonset = copy.deepcopy(_by_kind(url_docs)["DaemonSet/gpu-airgap-node"])
    kubernetes_validate.validate(daemonset, "1.32", strict=True)
    breakage(daemonset)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, "1.32", strict=True)


def test_daemonset_runs_the_installer_on_gpu_nodes_with_the_host_root_mounted(
    url_docs: List[Dict[str, Any]], operator_key: TestKey
) -> None:
    docs = _by_kind(url_docs)
    pod = docs["DaemonSet/gpu-airgap-node"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu": "true"}
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}
    ]
    assert pod["hostPID"] is True and pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["securityContext"] == {"privileged": True}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GPU_AIRGAP_RUNTIME"] == "containerd"
    assert env["GPU_AIRGAP_BUNDLE_URL"] == "https://mirror.internal/nvct-1.17.8.tar.zst"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["host-root"]["hostPath"] == {"path": "/", "type": "Directory"}
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["host-root"] == "/host"
    # --tools host (default): a busybox stages the program on the node and runs it with the node's python3 under chroot
    assert container["image"] == "busybox:1.36" and container["command"] == [
        "/bin/sh",
        "-c",
        fleet_k8s.HOST_WRAPPER,
    ]
    assert (env["GPU_AIRGAP_HOST_MOUNT"], env["GPU_AIRGAP_HOST_ROOT"], env["GPU_AIRGAP_CACHE"]) == (
        "/host",
        "/",
        fleet_k8s.HOST_CACHE,
    )
    assert env["GPU_AIRGAP_KEYRING"] == f"{fleet_k8s.HOST_CACHE}/operator.asc"
    assert container["readinessProbe"]["exec"]["command"] == [
        "chroot",
        "/host",
        "python3",
        "-I",
        "-S",
        f"{fleet_k8s.HOST_CACHE}/k8s-node.py",
        "ready",
    ]
    # the pod's program and the operator key travel in ConfigMaps in the same namespace
    assert docs["ConfigMap/gpu-airgap-node-script"]["data"]["k8s-node.py"] == pod_script()
    assert (
        docs["ConfigMap/gpu-airgap-node-keyring"]["data"]["operator.asc"] == operator_key.public.read_text()
    )
    assert docs["RuntimeClass/nvidia"] == {
        **runtimeclass.manifest("nvidia", "nvidia"),
        "scheduling": {"nodeSelector": {"gpu": "true"}},
    }
    # privileged + hostPID: the namespace says so, or Pod Security "baseline" namespaces refuse the pod
    assert docs["Namespace/gpu-airgap"]["metadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "privileged"
    }
    assert pod["terminationGracePeriodSeconds"] >= 120  # an install in progress is finished, not killed


def test_configmap_bundle_and_existing_keyring_configmap_are_mounted(
    configmap_docs: List[Dict[str, Any]],
) -> None:
    docs = _by_kind(configmap_docs)
    assert "ConfigMap/gpu-airgap-node-keyring" not in docs  # the operator's own ConfigMap is used
    pod = docs["DaemonSet/gpu-airgap-node"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["bundle"]["configMap"] == {"name": "nvct-bundle"}
    assert volumes["keyring"]["configMap"] == {"name": "operator-key"}
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert (
        env["GPU_AIRGAP_BUNDLE_FILE"] == f"{fleet_k8s.HOST_CACHE}/bundle.configmap"
        and "GPU_AIRGAP_BUNDLE_URL" not in env
    )
    assert (env["GPU_AIRGAP_CDI"], env["GPU_AIRGAP_SET_AS_DEFAULT"], env["GPU_AIRGAP_HOLD"]) == (
        "on",
        "true",
        "true",
    )
    assert docs["RuntimeClass/nvidia-cdi"]["handler"] == "nvidia-cdi"
    assert {
        d["metadata"].get("namespace") for d in configmap_docs if d["kind"] in ("ConfigMap", "DaemonSet")
    } == {"kube-gpu"}


def test_tools_image_runs_the_images_python_against_the_host_root_mounted_at_host(
    image_docs: List[Dict[str, Any]],
) -> None:
    (container,) = _by_kind(image_docs)["DaemonSet/gpu-airgap-node"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert container["image"] == "registry.internal/gpu-airgap-node:1"
    assert container["command"] == ["python3", "/etc/gpu-airgap/script/k8s-node.py"]
    assert container["readinessProbe"]["exec"]["command"] == [*container["command"], "ready"]
    assert env["GPU_AIRGAP_HOST_ROOT"] == "/host" and "GPU_AIRGAP_HOST_MOUNT" not in env
    assert (env["GPU_AIRGAP_KEYRING"], env["GPU_AIRGAP_BUNDLE_FILE"]) == (
        "/etc/gpu-airgap/keyring/operator.asc",
        "/etc/gpu-airgap/bundle/bundle",
    )


def test_out_writes_the_same_manifests_to_a_file(operator_key: TestKey, tmp_path: Path) -> None:
    args = (
        "--bundle-url",
        "http://10.0.0.1/b.tar.zst",
        "--bundle-sha256",
        SHA,
        "--keyring",
        str(operator_key.public),
    )
    out = tmp_path / "sub" / "gpu-airgap.yaml"
    assert run_cli("fleet", "k8s", *args, "--output", str(out)).exit_code == 0
    assert list(yaml.safe_load_all(out.read_text())) == _render(*args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--keyring-configmap", "k"],
            "exactly one of --bundle oci://…, --bundle-url and --bundle-configmap",
        ),
        (
            ["--bundle-url", "http://x/b", "--bundle-configmap", "b", "--keyring-configmap", "k"],
            "exactly one of --bundle oci",
        ),
        (
            ["--bundle-url", "http://x/b", "--bundle-sha256", SHA],
            "exactly one of --keyring and --keyring-configmap",
        ),
        (
            ["--bundle-url", "http://x/b", "--keyring-configmap", "k"],
            "give --bundle-file FILE (a local copy) or --bundle-sha256",
        ),
        (
            ["--bundle-url", "http://x/b", "--bundle-sha256", "AB" * 32, "--keyring-configmap", "k"],
            "64 lowercase hex digits",
        ),
        (
            ["--bundle", "oci://r.internal/nvct:1", "--bundle-sha256", SHA, "--keyring-configmap", "k"],
            "carries its own digest",
        ),
        (["--bundle", "https://r.internal/nvct", "--keyring-configmap", "k"], "must be an oci://"),
        (
            [*BY_CONFIGMAP, "--max-unavailable", "0"],
            "must be a number of nodes",
        ),
        (
            [*BY_CONFIGMAP, "--max-unavailable", "150%"],
            "or a percentage",
        ),
        (
            ["--bundle-url", "ftp://x/b", "--bundle-sha256", SHA, "--keyring-configmap", "k"],
            "must be an http:// or https:// URL",
        ),
        (
            [*BY_URL, "--node-selector", "gpu"],
            "must be LABEL=VALUE",
        ),
        (
            [*BY_URL, "--toleration", "gpu:Sometimes"],
            "must be KEY[=VALUE][:EFFECT]",
        ),
        (
            [*BY_URL, "--namespace", "GPU"],
            "must be a lowercase DNS label",
        ),
        (
            [*BY_URL, "--runtime-name", "Nvidia"],
            "must be a lowercase DNS",
        ),
    ],
)
def test_bad_options_are_one_sentence_usage_errors(args: List[str], message: str, tmp_path: Path) -> None:
    out = tmp_path / "out.yaml"
    result = run_cli("fleet", "k8s", *args, "--output", str(out))
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_keyring_that_is_not_an_armored_public_key_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "key.gpg"
    bad.write_bytes(b"\x99\x01binary")
    result = run_cli("fleet", "k8s", "--bundle-url", "http://x/b", "--keyring", str(bad))
    assert result.exit_code == 2 and "is not an armored public key" in result.stderr, result.stderr
    missing = run_cli("fleet", "k8s", "--bundle-url", "http://x/b", "--keyring", str(tmp_path / "nope.asc"))
    assert missing.exit_code == 2 and "nope.asc does not exist" in missing.stderr, missing.stderr


def test_rendering_is_pure_and_repeatable() -> None:
    options = fleet_k8s.K8sOptions(
        bundle_url="http://x/b", bundle_digest=f"sha256:{SHA}", keyring_configmap="k"
    )
    assert fleet_k8s.render(options, "print()\n", None) == fleet_k8s.render(options, "print()\n", None)


# -- the pod's program, run for real with a scratch root as the host ---------------------------


@pytest.fixture()
def bundle_server(deb_bundle: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(deb_bundle.parent))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{deb_bundle.name}"
    server.shutdown()
    server.server_close()


def _pod(script: Path, env: Dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(node_python()), str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
def test_pod_program_installs_from_the_url_restarts_nothing_under_a_scratch_root_and_turns_ready(
    bundle_server: str, deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    host = tmp_path / "host"
    seed_containerd_node(host)
    script = tmp_path / "k8s-node.py"
    script.write_text(pod_script())
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GPU_AIRGAP_NODE_CACHE": str(tmp_path / "zipapp-cache"),
        "GPU_AIRGAP_HOST_ROOT": str(host),
        "GPU_AIRGAP_BUNDLE_URL": bundle_server,
        "GPU_AIRGAP_KEYRING": str(operator_key.public),
        "GPU_AIRGAP_RUNTIME": "containerd",
        "GPU_AIRGAP_RUNTIME_NAME": "nvidia",
        "GPU_AIRGAP_CDI": "off",
        "GPU_AIRGAP_RESTART": "none",
        "GPU_AIRGAP_ONESHOT": "true",
        "GPU_AIRGAP_READY_FILE": str(tmp_path / "ready"),
    }
    assert _pod(script, env, "ready").returncode == 1  # not ready before the install
    first = _pod(script, env)
    assert first.returncode == 0, first.stderr
    assert "not restarting containerd (GPU_AIRGAP_RESTART=none)" in first.stderr
    assert json.loads((tmp_path / "ready").read_text())["outcome"] == "installed"
    assert _pod(script, env, "ready").returncode == 0, "the readiness check failed after the install"
    listed = subprocess.run(
        ["dpkg-query", f"--admindir={host}/var/lib/dpkg", "-W", "-f=${Package}\n"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert set(TOOLKIT) <= set(listed.stdout.split())
    # a restarted pod (here: from the ConfigMap copy) finds the node up to date and restarts nothing
    env = {k: v for k, v in env.items() if k != "GPU_AIRGAP_BUNDLE_URL"} | {
        "GPU_AIRGAP_BUNDLE_FILE": str(deb_bundle)
    }
    second = _pod(script, env)
    assert second.returncode == 0, second.stderr
    assert (
        json.loads((tmp_path / "ready").read_text())["outcome"] == "up-to-date"
        and "restart" not in second.stderr
    )


def test_pod_program_fails_with_one_sentence_when_the_bundle_cannot_be_fetched(
    operator_key: TestKey, tmp_path: Path
) -> None:
    host = tmp_path / "host"
    seed_dpkg_root(host)
    before = tree_digest(host)
    script = tmp_path / "k8s-node.py"
    script.write_text(pod_script())
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        "PATH": os.environ["PATH"],
        "GPU_AIRGAP_HOST_ROOT": str(host),
        "GPU_AIRGAP_BUNDLE_URL": f"http://127.0.0.1:{port}/b.tar.zst",
        "GPU_AIRGAP_KEYRING": str(operator_key.public),
        "GPU_AIRGAP_READY_FILE": str(tmp_path / "ready"),
    }
    failed = _pod(script, env)
    fetching, error = failed.stderr.strip().splitlines()  # progress, then the one-sentence error
    assert failed.returncode != 0 and fetching.startswith("gpu-airgap-k8s: fetching http://127.0.0.1:")
    assert (
        error.startswith("gpu-airgap-k8s: could not fetch the bundle from http://127.0.0.1:")
        and "Connection refused" in error
    )
    assert not (tmp_path / "ready").exists() and _pod(script, env, "ready").returncode == 1
    assert {k: v for k, v in tree_digest(host).items() if not k.startswith("var/cache")} == before


class HostPod:
    """The real ``--tools host`` wrapper and chroot, with the machine's own / standing in for the node's
    (``chroot /`` is the identity), the pod's mounts under ``tmp_path``, and the install aimed at a scratch root."""

    def __init__(self, tmp_path: Path, key: Path, bundle: Path | None) -> None:
        self.mounts, self.cache, self.host = tmp_path / "pod", tmp_path / "node-cache", tmp_path / "host"
        seed_containerd_node(self.host)
        files = {"script/k8s-node.py": pod_script().encode(), "keyring/operator.asc": key.read_bytes()}
        if bundle is not None:
            files["bundle/bundle"] = bundle.read_bytes()  # the bundle ConfigMap
        for rel, data in files.items():
            (self.mounts / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.mounts / rel).write_bytes(data)
        self.cache.mkdir()
        self.wrapper = fleet_k8s.HOST_WRAPPER.replace("/etc/gpu-airgap/", f"{self.mounts}/")
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "GPU_AIRGAP_NODE_CACHE": str(tmp_path / "zipapp-cache"),
            "GPU_AIRGAP_HOST_MOUNT": "/",
            "GPU_AIRGAP_CACHE": str(self.cache),
            "GPU_AIRGAP_HOST_ROOT": str(self.host),
            "GPU_AIRGAP_KEYRING": str(self.cache / "operator.asc"),
            "GPU_AIRGAP_READY_FILE": str(self.cache / "ready"),
            "GPU_AIRGAP_RUNTIME": "containerd",
            "GPU_AIRGAP_CDI": "off",
            "GPU_AIRGAP_RESTART": "none",
            "GPU_AIRGAP_ONESHOT": "true",
        }
        if bundle is not None:
            self.env["GPU_AIRGAP_BUNDLE_FILE"] = str(self.cache / "bundle.configmap")

    def run(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/sh", "-c", self.wrapper],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def ready(self) -> bool:
        probe = ["chroot", "/", "python3", "-I", "-S", str(self.cache / "k8s-node.py"), "ready"]
        return subprocess.run(probe, env=self.env, check=False).returncode == 0


@pytest.mark.slow
def test_host_tools_wrapper_stages_the_program_on_the_node_and_a_stale_ready_marker_never_passes(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    # First the key ConfigMap holds another key than the one that signed the bundle.
    pod = HostPod(tmp_path, other_key.public, deb_bundle)
    (pod.cache / "ready").write_text("{}")  # left on the node by an earlier pod
    before = tree_digest(pod.host)
    failed = pod.run()
    assert failed.returncode == ExitCode.VERIFICATION_FAILED, failed.stderr
    assert (pod.cache / "k8s-node.py").read_text() == pod_script()
    assert (pod.cache / "bundle.configmap").read_bytes() == deb_bundle.read_bytes()
    assert not (pod.cache / "ready").exists() and not pod.ready()
    assert tree_digest(pod.host) == before

    (pod.mounts / "keyring/operator.asc").write_bytes(operator_key.public.read_bytes())
    done = pod.run()
    assert done.returncode == 0, done.stderr
    assert json.loads((pod.cache / "ready").read_text())["outcome"] == "installed"
    assert pod.ready()


@pytest.mark.slow
def test_host_tools_wrapper_fetches_the_bundle_url_in_the_pods_network_before_entering_the_node(
    bundle_server: str, operator_key: TestKey, tmp_path: Path
) -> None:
    pod = HostPod(tmp_path, operator_key.public, None)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/b.tar.zst"
    pod.env["GPU_AIRGAP_BUNDLE_URL"] = dead
    failed = pod.run()
    assert (
        failed.returncode == 1
        and failed.stderr.strip().splitlines()[-1]
        == f"gpu-airgap-k8s: could not fetch the bundle from {dead}"
    )
    assert not (pod.cache / "bundle").exists() and not pod.ready()

    pod.env["GPU_AIRGAP_BUNDLE_URL"] = bundle_server
    done = pod.run()
    assert done.returncode == 0, done.stderr
    assert "fetching http://127.0.0.1:" in done.stderr and (pod.cache / "bundle").is_file()
    assert json.loads((pod.cache / "ready").read_text())["outcome"] == "installed" and pod.ready()


# -- the pod program checks the node tool against the operator key before running it -------------


def _attack(attack: str, bundle: Path, other_key: TestKey, marker: Path, out: Path) -> Path:
    """``bundle`` with a node tool that writes ``marker`` if run, as each attacker (or an old build) leaves it."""
    evil = {NODE_TOOL: tamper.marker_zipapp(marker)}
    if attack == "tampered-tool":  # the original NODE-SHA256SUMS and signatures
        return tamper.repack(bundle, out, evil)
    if attack == "resigned-by-another-key":
        return tamper.repack(bundle, out, tamper.resigned_node_check(bundle, other_key, evil))
    return tamper.repack(bundle, out, evil, drop=[NODE_SUMS, NODE_SUMS_SIGNATURE])  # an older build's layout


@pytest.mark.parametrize(
    ("attack", "words"),
    [
        ("tampered-tool", "does not match its signed NODE-SHA256SUMS"),
        ("resigned-by-another-key", "is not signed by the operator key"),
        ("no-node-check", "has no NODE-SHA256SUMS"),
    ],
)
def test_pod_program_refuses_a_node_tool_that_is_not_the_operators_and_never_runs_it(
    attack: str, words: str, deb_bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    marker = tmp_path / "MARKER"
    bad = _attack(attack, deb_bundle, other_key, marker, tmp_path / "bad.tar.zst")
    host = tmp_path / "host"
    seed_containerd_node(host)
    before = tree_digest(host)
    script = tmp_path / "k8s-node.py"
    script.write_text(pod_script())
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GPU_AIRGAP_HOST_ROOT": str(host),
        "GPU_AIRGAP_BUNDLE_FILE": str(bad),
        "GPU_AIRGAP_KEYRING": str(operator_key.public),
        "GPU_AIRGAP_READY_FILE": str(tmp_path / "ready"),
        "GPU_AIRGAP_NODE_CACHE": str(tmp_path / "zipapp-cache"),
        "GPU_AIRGAP_ONESHOT": "true",
    }
    failed = _pod(script, env)
    assert failed.returncode == ExitCode.VERIFICATION_FAILED, failed.stderr
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith("gpu-airgap-k8s: ") and words in line, line
    assert not marker.exists(), "the tampered node tool ran"
    assert (
        not (host / "var/cache/gpu-airgap/k8s/gpu-airgap-node.pyz").exists()
        and _pod(script, env, "ready").returncode == 1
    )
    assert not marker.exists()
    assert {k: v for k, v in tree_digest(host).items() if not k.startswith("var/cache")} == before


def _load_pod_program() -> Any:
    spec = importlib.util.spec_from_file_location(
        "k8s_node", Path(fleet_k8s.__file__).parent / "data" / "k8s-node.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pod_program_checks_with_gpg_where_the_node_has_no_gpgv(
    deb_bundle: Path,
    operator_key: TestKey,
    other_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bin_dir = tmp_path / "bin"  # a node with GnuPG but no gpgv
    bin_dir.mkdir()
    for tool in ("tar", "zstd", "gpg"):
        (bin_dir / tool).symlink_to(f"/usr/bin/{tool}")
    monkeypatch.setenv("PATH", str(bin_dir))
    program = _load_pod_program()
    dest = tmp_path / "cache" / NODE_TOOL
    dest.parent.mkdir()
    program.node_tool(deb_bundle, dest, operator_key.public)
    assert dest.read_bytes() == tamper.node_files(deb_bundle)[NODE_TOOL]
    bad = _attack(
        "resigned-by-another-key", deb_bundle, other_key, tmp_path / "MARKER", tmp_path / "bad.tar.zst"
    )
    with pytest.raises(SystemExit) as refused:
        program.node_tool(bad, dest, operator_key.public)
    assert refused.value.code == ExitCode.VERIFICATION_FAILED and not dest.exists()
    assert sorted(p.name for p in dest.parent.iterdir()) == []  # no working copy left behind


def test_pod_program_refuses_an_unreadable_registry_secret_with_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "config.json"
    secret.write_text("{not json")
    monkeypatch.setenv("GPU_AIRGAP_REGISTRY_CONFIG", str(secret))
    program = _load_pod_program()
    ref = "oci://127.0.0.1:1/gpu-airgap/nvct@sha256:" + "a" * 64
    with pytest.raises(SystemExit) as failed:
        program.pull_bundle(ref, tmp_path / "bundle", tmp_path / "operator.asc")
    assert str(failed.value.code).startswith(f"gpu-airgap-k8s: could not pull {ref}: ")
    assert not (tmp_path / "bundle").exists()


def test_pod_program_without_its_bundle_file_fails_with_one_sentence(
    operator_key: TestKey, tmp_path: Path
) -> None:
    script = tmp_path / "k8s-node.py"
    script.write_text(pod_script())
    env = {
        "PATH": os.environ["PATH"],
        "GPU_AIRGAP_HOST_ROOT": str(tmp_path / "host"),
        "GPU_AIRGAP_BUNDLE_FILE": str(tmp_path / "absent"),
        "GPU_AIRGAP_BUNDLE_DIGEST": "sha256:" + "a" * 64,
        "GPU_AIRGAP_KEYRING": str(operator_key.public),
        "GPU_AIRGAP_READY_FILE": str(tmp_path / "ready"),
    }
    failed = _pod(script, env)
    (line,) = failed.stderr.strip().splitlines()
    assert (
        failed.returncode != 0 and line.startswith("gpu-airgap-k8s: ") and str(tmp_path / "absent") in line
    ), failed.stderr
    assert not (tmp_path / "ready").exists()
