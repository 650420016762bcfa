"""Issue 16 item 3: a DaemonSet that rolls when the bundle changes, at a chosen pace, from a registry.

Rendering: the bundle's digest is in the pod template (a new bundle is a new template, so the
DaemonSet rolls), ``--max-unavailable`` sets the pace (10% by default), ``--on-delete`` is the canary
step, the RuntimeClass schedules onto the nodes the DaemonSet installs, and ``--bundle oci://…`` (a
tag resolved against the real ``docker-registry``) makes each node pull by digest. Every manifest
validates against the Kubernetes schemas. The pod's program is run for real against the registry:
it pulls by digest and installs, a tampered blob is refused with nothing installed, and readiness
follows the installed bundle's digest.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Dict

import kubernetes_validate
import pytest
import yaml

from mirror.fleet import k8s as fleet_k8s
from mirror.fleet.cli import pod_script
from plumbing.errors import ExitCode
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import (
    CONTAINERD_CONFIG,
    TOOLKIT,
    dpkg_versions,
    node_python,
    seed_containerd_node,
    tree_digest,
)
from tests.oci_registry import Registry, make_tls, registry_with_login
from tests.test_fleet_k8s import HostPod

K8S_VERSIONS = ("1.29", "1.32", "1.37")


def _render(*args: str) -> Dict[str, Dict[str, Any]]:
    result = run_cli("fleet", "k8s", "--keyring-configmap", "operator-key", *args)
    assert result.exit_code == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    for doc in docs:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def _daemonset(docs: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    return docs["DaemonSet/gpu-airgap-node"]


def _env(daemonset: Dict[str, Any]) -> Dict[str, str]:
    return {e["name"]: e["value"] for e in daemonset["spec"]["template"]["spec"]["containers"][0]["env"]}


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_new_bundle_changes_the_pod_template_and_the_same_bundle_does_not(tmp_path: Path) -> None:
    old, new = tmp_path / "old.tar.zst", tmp_path / "new.tar.zst"
    old.write_bytes(b"bundle one")
    new.write_bytes(b"bundle two")
    url = ("--bundle-url", "http://mirror.internal/nvct.tar.zst")
    first = _daemonset(_render(*url, "--bundle-file", str(old)))
    again = _daemonset(_render(*url, "--bundle-sha256", _sha256(old).split(":")[1]))
    second = _daemonset(_render(*url, "--bundle-file", str(new)))
    assert first["spec"]["template"]["metadata"]["annotations"] == {fleet_k8s.DIGEST_ANNOTATION: _sha256(old)}
    assert _env(first)["GPU_AIRGAP_BUNDLE_DIGEST"] == _sha256(old)
    assert again["spec"]["template"] == first["spec"]["template"]  # the same bundle: nothing rolls
    assert second["spec"]["template"] != first["spec"]["template"]  # a new bundle behind the same URL rolls
    assert second["spec"]["template"]["metadata"]["annotations"][fleet_k8s.DIGEST_ANNOTATION] == _sha256(new)


@pytest.mark.parametrize(
    ("flags", "strategy"),
    [
        ((), {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}),
        (("--max-unavailable", "3"), {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 3}}),
        (
            ("--max-unavailable", "100%"),
            {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
        ),
        (("--on-delete",), {"type": "OnDelete"}),
    ],
    ids=["default-10-percent", "count", "percent", "canary-on-delete"],
)
def test_max_unavailable_and_on_delete_set_the_update_strategy(
    flags: tuple[str, ...], strategy: Dict[str, Any]
) -> None:
    daemonset = _daemonset(_render("--bundle-configmap", "nvct", "--bundle-sha256", "cd" * 32, *flags))
    assert daemonset["spec"]["updateStrategy"] == strategy


def test_runtimeclass_schedules_pods_onto_the_nodes_the_daemonset_installs() -> None:
    docs = _render(
        "--bundle-configmap",
        "nvct",
        "--bundle-sha256",
        "cd" * 32,
        "--node-selector",
        "pool=a100",
        "--node-selector",
        "gpu=true",
    )
    assert docs["RuntimeClass/nvidia"]["scheduling"] == {"nodeSelector": {"pool": "a100", "gpu": "true"}}
    assert _daemonset(docs)["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "a100", "gpu": "true"}


def test_idle_pod_asks_for_little_and_is_probed_often_enough_to_roll_fast(tmp_path: Path) -> None:
    pod = _daemonset(_render("--bundle-configmap", "nvct", "--bundle-sha256", "cd" * 32))["spec"]["template"][
        "spec"
    ]
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "10m", "memory": "32Mi"}}
    probe = pod["containers"][0]["readinessProbe"]
    assert (probe["initialDelaySeconds"], probe["periodSeconds"]) == (2, 5)


# -- the registry -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with Registry(tmp_path_factory.mktemp("k8s-registry")) as reg:
        yield reg


@pytest.fixture(autouse=True)
def _no_docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))


def _push(bundle: Path, ref: str, key: TestKey) -> str:
    pushed = run_cli("bundle", "push", str(bundle), ref, "--keyring", str(key.public), "--json")
    assert pushed.exit_code == 0, pushed.stderr
    return str(json.loads(pushed.stdout)["digest"])


def test_bundle_from_a_registry_tag_is_pinned_to_its_digest_in_the_pod_template(
    registry: Registry, deb_bundle: Path, operator_key: TestKey
) -> None:
    digest = _push(deb_bundle, registry.ref("k8s/nvct:1.17.8"), operator_key)
    for tools in ("host", "image"):
        daemonset = _daemonset(
            _render(
                "--bundle", registry.ref("k8s/nvct:1.17.8"), "--tools", tools, "--registry-secret", "pull"
            )
        )
        template = daemonset["spec"]["template"]
        env = _env(daemonset)
        assert (
            env["GPU_AIRGAP_BUNDLE_REF"] == registry.ref(f"k8s/nvct@{digest}")
            and env["GPU_AIRGAP_BUNDLE_DIGEST"] == digest
        )
        assert template["metadata"]["annotations"] == {fleet_k8s.DIGEST_ANNOTATION: digest}
        assert "GPU_AIRGAP_BUNDLE_URL" not in env and "GPU_AIRGAP_BUNDLE_FILE" not in env
        # the node's own network and resolver reach its registry (the kubelet pulls images from it)
        assert template["spec"]["hostNetwork"] is True and template["spec"]["imagePullSecrets"] == [
            {"name": "pull"}
        ]
        secret = {v["name"]: v for v in template["spec"]["volumes"]}["registry"]["secret"]
        assert secret == {"secretName": "pull", "defaultMode": 0o400}
    pinned = _daemonset(_render("--bundle", registry.ref(f"k8s/nvct@{digest}")))
    assert _env(pinned)["GPU_AIRGAP_BUNDLE_REF"] == registry.ref(f"k8s/nvct@{digest}")


def test_a_tag_that_is_not_in_the_registry_is_one_sentence(registry: Registry) -> None:
    result = run_cli("fleet", "k8s", "--keyring-configmap", "k", "--bundle", registry.ref("k8s/none:1"))
    assert result.exit_code != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("gpu-airgap: error: "), (
        result.stderr
    )


# -- the pod's program against the real registry ----------------------------------------------------


class Pod:
    """``k8s-node.py`` with ``--tools image``'s environment, a scratch root as the host."""

    def __init__(self, tmp_path: Path, key: Path, **env: str) -> None:
        self.host, self.ready_file = tmp_path / "host", tmp_path / "ready"
        seed_containerd_node(self.host)
        self.script = tmp_path / "k8s-node.py"
        self.script.write_text(pod_script())
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "GPU_AIRGAP_NODE_CACHE": str(tmp_path / "zipapp-cache"),
            "GPU_AIRGAP_HOST_ROOT": str(self.host),
            "GPU_AIRGAP_KEYRING": str(key),
            "GPU_AIRGAP_RUNTIME": "containerd",
            "GPU_AIRGAP_CDI": "off",
            "GPU_AIRGAP_RESTART": "none",
            "GPU_AIRGAP_ONESHOT": "true",
            "GPU_AIRGAP_READY_FILE": str(self.ready_file),
            "GPU_AIRGAP_REGISTRY_PLAIN_HTTP": "true",
            **env,
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(node_python()), str(self.script), *args]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.slow
def test_pod_pulls_the_bundle_by_digest_installs_it_and_readiness_follows_the_templates_digest(
    registry: Registry, deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    digest = _push(deb_bundle, registry.ref("k8s/pod:1"), operator_key)
    pod = Pod(
        tmp_path,
        operator_key.public,
        GPU_AIRGAP_BUNDLE_REF=registry.ref(f"k8s/pod@{digest}"),
        GPU_AIRGAP_BUNDLE_DIGEST=digest,
    )
    assert pod.run("ready").returncode == 1
    done = pod.run()
    assert done.returncode == 0, done.stderr
    assert f"pulling {registry.ref('k8s/pod@')}{digest}" in done.stderr
    assert dpkg_versions(pod.host) == dict.fromkeys(TOOLKIT, "1.17.8-1")
    marker = json.loads(pod.ready_file.read_text())
    assert marker["bundle_digest"] == digest and marker["outcome"] == "installed"
    assert pod.run("ready").returncode == 0
    # the probe is cheap between full checks: a drifted config shows once the full check is due again
    checked = pod.ready_file.with_name("ready.checked")
    assert checked.exists()
    (pod.host / "etc/containerd/config.toml").write_bytes(CONTAINERD_CONFIG)
    assert pod.run("ready").returncode == 0
    due = time.time() - 301
    os.utime(checked, (due, due))
    assert pod.run("ready").returncode == 1 and not checked.exists()
    # a pod of a newer template (another bundle) is not ready on what this one installed
    pod.env["GPU_AIRGAP_BUNDLE_DIGEST"] = "sha256:" + "0" * 64
    assert pod.run("ready").returncode == 1


@pytest.mark.slow
def test_pod_refuses_a_tampered_blob_from_the_registry_and_installs_nothing(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    with Registry(tmp_path / "registry") as registry:
        digest = _push(deb_bundle, registry.ref("k8s/tampered:1"), operator_key)
        manifest = json.loads(registry.blob_data(digest).read_bytes())
        blob = registry.blob_data(manifest["layers"][0]["digest"])
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
        pod = Pod(
            tmp_path,
            operator_key.public,
            GPU_AIRGAP_BUNDLE_REF=registry.ref(f"k8s/tampered@{digest}"),
            GPU_AIRGAP_BUNDLE_DIGEST=digest,
        )
        before = tree_digest(pod.host)
        failed = pod.run()
    assert failed.returncode == ExitCode.VERIFICATION_FAILED, failed.stderr
    assert "does not match its digest; refusing it" in failed.stderr.strip().splitlines()[-1]
    assert not pod.ready_file.exists()
    assert {k: v for k, v in tree_digest(pod.host).items() if not k.startswith("var/cache")} == before
    assert not any(p.name.startswith("bundle") for p in (pod.host / "var/cache/gpu-airgap/k8s").iterdir())


def _spools(cache: Path) -> list[str]:
    return [p.name for p in cache.iterdir() if p.name.startswith((".", "gpu-airgap-pull-", "bundle.part"))]


@pytest.mark.slow
def test_pod_installs_a_split_bundle_pulled_part_by_part_by_digest(
    registry: Registry, split_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    digest = _push(split_bundle / "nvct.tar.zst.part001", registry.ref("k8s/split:1"), operator_key)
    pod = Pod(
        tmp_path,
        operator_key.public,
        GPU_AIRGAP_BUNDLE_REF=registry.ref(f"k8s/split@{digest}"),
        GPU_AIRGAP_BUNDLE_DIGEST=digest,
    )
    done = pod.run()
    assert done.returncode == 0, done.stderr
    assert "is a split bundle: the node tool pulls its parts" in done.stderr
    assert dpkg_versions(pod.host) == dict.fromkeys(TOOLKIT, "1.17.8-1")
    marker = json.loads(pod.ready_file.read_text())
    assert marker["bundle_digest"] == digest and marker["outcome"] == "installed"
    assert pod.run("ready").returncode == 0
    cache = pod.host / "var/cache/gpu-airgap/k8s"
    # the pod kept only the first part it checked; the node tool's private download is gone
    assert (cache / "bundle").read_bytes() == (split_bundle / "nvct.tar.zst.part001").read_bytes()
    assert _spools(cache) == []


@pytest.mark.slow
@pytest.mark.parametrize("damaged", ["first-part", "last-part", "other-key"])
def test_pod_refuses_a_tampered_split_bundle_and_installs_nothing(
    split_bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path, damaged: str
) -> None:
    with Registry(
        tmp_path / "registry"
    ) as registry:  # its own: blobs are shared by digest across repositories
        digest = _push(split_bundle / "nvct.tar.zst.part001", registry.ref("k8s/tampered:1"), operator_key)
        layers = json.loads(registry.blob_data(digest).read_bytes())["layers"]
        assert [la["mediaType"].rsplit(".", 2)[-2] for la in layers[-3:]] == [
            "part",
            "sha256sums",
            "signature",
        ]
        if damaged != "other-key":
            blob = registry.blob_data(layers[0 if damaged == "first-part" else -3]["digest"])
            data = bytearray(blob.read_bytes())
            data[len(data) // 2] ^= 0xFF
            blob.write_bytes(bytes(data))
        key = other_key if damaged == "other-key" else operator_key
        pod = Pod(
            tmp_path,
            key.public,
            GPU_AIRGAP_BUNDLE_REF=registry.ref(f"k8s/tampered@{digest}"),
            GPU_AIRGAP_BUNDLE_DIGEST=digest,
        )
        before = tree_digest(pod.host)
        failed = pod.run()
    assert failed.returncode == ExitCode.VERIFICATION_FAILED, failed.stderr
    last = failed.stderr.strip().splitlines()[-1]
    if damaged == "other-key":
        assert "is not signed by the operator key" in last, failed.stderr
    else:
        assert "does not match its digest" in last, failed.stderr
    assert ("the node tool pulls its parts" in failed.stderr) == (damaged == "last-part")  # who caught it
    assert not pod.ready_file.exists() and "Traceback" not in failed.stderr
    assert {k: v for k, v in tree_digest(pod.host).items() if not k.startswith("var/cache")} == before
    cache = pod.host / "var/cache/gpu-airgap/k8s"
    assert _spools(cache) == []
    if damaged != "last-part":
        assert not (cache / "bundle").exists() and not (cache / "gpu-airgap-node.pyz").exists()


def _bundle_of_kind(request: pytest.FixtureRequest, kind: str) -> Path:
    """The session's whole bundle, or the first part of its split bundle (what `bundle push` is given)."""
    if kind == "whole":
        return Path(request.getfixturevalue("deb_bundle"))
    return Path(request.getfixturevalue("split_bundle")) / "nvct.tar.zst.part001"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["whole", "split"])
def test_pod_pulls_with_the_registry_secrets_basic_credentials(
    operator_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    kind: str,
) -> None:
    # a split bundle's parts are pulled by the node tool, which gets the same secret as its Docker config
    bundle = _bundle_of_kind(request, kind)
    with registry_with_login(tmp_path) as (registry, config):
        monkeypatch.setenv("DOCKER_CONFIG", str(config.directory))
        digest = _push(bundle, registry.ref("k8s/auth:1"), operator_key)
        ref = registry.ref(f"k8s/auth@{digest}")
        anonymous = Pod(
            tmp_path / "anon", operator_key.public, GPU_AIRGAP_BUNDLE_REF=ref, GPU_AIRGAP_BUNDLE_DIGEST=digest
        )
        refused = anonymous.run()
        assert (
            refused.returncode == 1
            and "could not pull" in refused.stderr
            and "Unauthorized" in refused.stderr
        ), refused.stderr
        pod = Pod(
            tmp_path / "pod",
            operator_key.public,
            GPU_AIRGAP_BUNDLE_REF=ref,
            GPU_AIRGAP_BUNDLE_DIGEST=digest,
            GPU_AIRGAP_REGISTRY_CONFIG=str(config.directory / "config.json"),
        )
        done = pod.run()
    assert done.returncode == 0, done.stderr
    assert dpkg_versions(pod.host) == dict.fromkeys(TOOLKIT, "1.17.8-1")


@pytest.mark.slow
def test_pod_refuses_a_url_bundle_that_is_not_the_templates(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    pod = Pod(
        tmp_path,
        operator_key.public,
        GPU_AIRGAP_BUNDLE_FILE=str(deb_bundle),
        GPU_AIRGAP_BUNDLE_DIGEST="sha256:" + "1" * 64,
    )
    before = tree_digest(pod.host)
    failed = pod.run()
    assert failed.returncode == ExitCode.VERIFICATION_FAILED, failed.stderr
    assert "is not the one the DaemonSet names" in failed.stderr
    assert {k: v for k, v in tree_digest(pod.host).items() if not k.startswith("var/cache")} == before


def test_distro_and_take_over_reach_the_installer_on_every_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    daemonset = _daemonset(
        _render("--bundle-configmap", "nvct", "--bundle-sha256", "cd" * 32, "--distro", "k3s", "--take-over")
    )
    env = _env(daemonset)
    assert (env["GPU_AIRGAP_DISTRO"], env["GPU_AIRGAP_TAKE_OVER"]) == ("k3s", "true")
    script = tmp_path / "k8s_node.py"
    script.write_text(pod_script())
    spec = importlib.util.spec_from_file_location("k8s_node_under_test", script)
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = program.install_argv(Path("/tool.pyz"), Path("/bundle"))
    assert argv[argv.index("--distro") + 1] == "k3s" and "--force" in argv
    monkeypatch.delenv("GPU_AIRGAP_DISTRO")
    monkeypatch.setenv("GPU_AIRGAP_TAKE_OVER", "false")
    argv = program.install_argv(Path("/tool.pyz"), Path("/bundle"))
    assert "--distro" not in argv and "--force" not in argv


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["whole", "split"])
def test_host_tools_wrapper_hands_the_registry_secret_to_the_pull_inside_the_node(
    operator_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    kind: str,
) -> None:
    bundle = _bundle_of_kind(request, kind)
    with registry_with_login(tmp_path) as (registry, config):
        monkeypatch.setenv("DOCKER_CONFIG", str(config.directory))
        digest = _push(bundle, registry.ref("k8s/host:1"), operator_key)
        pod = HostPod(tmp_path / "pod", operator_key.public, None)
        secret = pod.mounts / "registry/.dockerconfigjson"  # the --registry-secret volume
        secret.parent.mkdir(parents=True)
        secret.write_bytes((config.directory / "config.json").read_bytes())
        pod.env.update(
            GPU_AIRGAP_BUNDLE_REF=registry.ref(f"k8s/host@{digest}"),
            GPU_AIRGAP_BUNDLE_DIGEST=digest,
            GPU_AIRGAP_REGISTRY_PLAIN_HTTP="true",
            GPU_AIRGAP_REGISTRY_CONFIG=str(pod.cache / "registry.json"),
        )
        done = pod.run()
    assert done.returncode == 0, done.stderr
    assert (pod.cache / "registry.json").stat().st_mode & 0o077 == 0, (
        "the credentials copy is readable by others"
    )
    assert json.loads((pod.cache / "ready").read_text())["bundle_digest"] == digest and pod.ready()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["whole", "split"])
def test_pod_pulls_from_a_tls_registry_with_the_rendered_registry_ca(
    operator_key: TestKey, tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    bundle = _bundle_of_kind(request, kind)
    ca, cert, key = make_tls(tmp_path / "tls")
    with Registry(tmp_path / "registry", tls=(cert, key)) as registry:
        pushed = run_cli(
            "bundle",
            "push",
            str(bundle),
            registry.ref("k8s/tls:1"),
            "--keyring",
            str(operator_key.public),
            "--ca-file",
            str(ca),
            "--json",
        )
        assert pushed.exit_code == 0, pushed.stderr
        digest = json.loads(pushed.stdout)["digest"]
        # the tag is resolved over TLS with the same CA, which also goes to the pods in a ConfigMap
        docs = _render("--bundle", registry.ref("k8s/tls:1"), "--registry-ca", str(ca))
        assert docs["ConfigMap/gpu-airgap-node-registry-ca"]["data"]["ca.pem"] == ca.read_text()
        env = _env(_daemonset(docs))
        assert (
            env["GPU_AIRGAP_REGISTRY_CA"] == f"{fleet_k8s.HOST_CACHE}/registry-ca.pem"
            and env["GPU_AIRGAP_BUNDLE_DIGEST"] == digest
        )
        ref = registry.ref(f"k8s/tls@{digest}")
        untrusted = Pod(
            tmp_path / "untrusted",
            operator_key.public,
            GPU_AIRGAP_BUNDLE_REF=ref,
            GPU_AIRGAP_BUNDLE_DIGEST=digest,
            GPU_AIRGAP_REGISTRY_PLAIN_HTTP="false",
        )
        refused = untrusted.run()
        assert (
            refused.returncode == 1
            and "could not pull" in refused.stderr
            and "CERTIFICATE_VERIFY_FAILED" in refused.stderr
        ), refused.stderr
        pod = Pod(
            tmp_path / "pod",
            operator_key.public,
            GPU_AIRGAP_BUNDLE_REF=ref,
            GPU_AIRGAP_BUNDLE_DIGEST=digest,
            GPU_AIRGAP_REGISTRY_PLAIN_HTTP="false",
            GPU_AIRGAP_REGISTRY_CA=str(ca),
        )
        done = pod.run()
    assert done.returncode == 0, done.stderr
    assert dpkg_versions(pod.host) == dict.fromkeys(TOOLKIT, "1.17.8-1")


def test_registry_ca_needs_an_oci_bundle_and_a_pem_file(tmp_path: Path) -> None:
    not_pem = tmp_path / "ca.der"
    not_pem.write_bytes(b"\x30\x82binary")
    bad = run_cli(
        "fleet",
        "k8s",
        "--keyring-configmap",
        "k",
        "--bundle",
        "oci://r.internal/x@sha256:" + "a" * 64,
        "--registry-ca",
        str(not_pem),
    )
    assert bad.exit_code == 2 and "is not a PEM certificate" in bad.stderr, bad.stderr
    ca, _, _ = make_tls(tmp_path / "tls")
    url = run_cli(
        "fleet",
        "k8s",
        "--keyring-configmap",
        "k",
        "--bundle-configmap",
        "b",
        "--bundle-sha256",
        "ab" * 32,
        "--registry-ca",
        str(ca),
    )
    assert url.exit_code == 2 and "--registry-ca applies to --bundle oci://… only" in url.stderr, url.stderr
