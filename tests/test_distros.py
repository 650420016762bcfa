"""Kubernetes distributions: detect -> configure -> containerd loads it -> report -> verify -> revert, per fixture.

The fixtures (``tests/data/fixtures/distros``, with their PROVENANCE.md) are what k3s, RKE2, MicroK8s,
k0s and the GPU Operator leave on a node. Every file we write is loaded by the containerd that
distribution ships: Debian's 1.6 for config version 2, containerd 2.1.5 for version 3
(``tests.engine_oracle``). Where the distribution regenerates its config at start (k3s/RKE2, MicroK8s),
the test plays that part: it renders what the agent would.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
import yaml

from configure.distros.detection import choose, detect
from configure.distros.engine import microk8s_render
from configure.distros.k3s_template import render_with_base
from tests.cli_runner import CliResult, run_cli
from tests.engine_oracle import Effective, containerd_2, containerd_effective, oracle_missing

FIXTURES = Path(__file__).parent / "data" / "fixtures" / "distros"
K3S = "/var/lib/rancher/k3s/agent/etc/containerd"
RKE2 = "/var/lib/rancher/rke2/agent/etc/containerd"
MICROK8S = "/var/snap/microk8s/current/args"
BINARY = "/usr/bin/nvidia-container-runtime"

needs_containerd = pytest.mark.skipif(bool(oracle_missing()), reason=oracle_missing() or "ok")


def node(
    tmp_path: Path,
    fixture: str,
    *,
    state: Optional[str] = None,
    toolkit: bool = True,
    drop: tuple[str, ...] = (),
) -> Path:
    """A node root from a fixture folder (``state``: one of its ``_`` alternative states laid over it)."""
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / fixture, root, ignore=shutil.ignore_patterns("_*"))
    if state is not None:
        shutil.copytree(
            FIXTURES / fixture / state, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("_*")
        )
    for path in drop:
        (root / path.lstrip("/")).unlink()
    if toolkit:  # the toolkit package's binary, as install leaves it
        (root / BINARY.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / BINARY.lstrip("/")).write_text("#!/bin/sh\n")
    return root


def tree(root: Path) -> Dict[str, str]:
    """Every file under ``root`` (but gpu-airgap's own journal) and its digest."""
    state = root / "var/lib/gpu-airgap"
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and state not in p.parents
    }


def loads(root: Path, node_path: str, tmp_path: Path) -> Effective:
    """What the distribution's containerd reads from ``node_path`` (on a copy: the oracle retargets imports)."""
    copy = tmp_path / f"oracle-{hashlib.sha256(node_path.encode()).hexdigest()[:8]}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy, symlinks=True)
    return containerd_effective(copy, node_path)


def configure(root: Path, *flags: str) -> CliResult:
    return run_cli("configure", "containerd", "--root", str(root), *flags)


def report(root: Path, *flags: str) -> Dict[str, Any]:
    done = run_cli("configure", "report", "--root", str(root), "--json", *flags)
    assert done.exit_code == 0, done.stderr
    facts: Dict[str, Any] = json.loads(done.stdout)
    return facts


def verify(root: Path, *flags: str) -> CliResult:
    return run_cli("configure", "verify", "--root", str(root), *flags)


# -- detection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "name", "units"),
    [
        ("k3s-v2", "k3s", ("k3s", "k3s-agent")),
        ("k3s-v3", "k3s", ("k3s", "k3s-agent")),
        ("rke2", "rke2", ("rke2-server", "rke2-agent")),
        ("microk8s", "microk8s", ("snap.microk8s.daemon-containerd",)),
        ("k0s", "k0s", ()),
        ("gpu-operator", "containerd", ("containerd",)),
    ],
)
def test_detection_names_the_distribution_its_config_and_the_unit_to_restart(
    tmp_path: Path, fixture: str, name: str, units: tuple[str, ...]
) -> None:
    root = node(tmp_path, fixture, toolkit=False)
    if fixture == "gpu-operator":
        shutil.rmtree(root / "var")  # the RKE2 paste beside it is another node
    chosen = choose(root)
    assert (chosen.name, chosen.units) == (name, units)
    assert (root / chosen.config.lstrip("/")).is_file()


def test_a_k3s_agent_unit_file_narrows_the_restart_to_that_unit(tmp_path: Path) -> None:
    root = node(tmp_path, "k3s-v3")
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system/k3s-agent.service").write_text(
        "[Service]\nExecStart=/usr/local/bin/k3s agent\n"
    )
    assert choose(root).units == ("k3s-agent",)
    assert "restart k3s-agent" in report(root)["restart"]


def test_several_containerds_are_listed_and_the_user_chooses(tmp_path: Path) -> None:
    root = node(tmp_path, "k3s-v3")
    (root / "etc/containerd").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_text('version = 2\ndisabled_plugins = ["cri"]\n')
    assert [d.name for d in detect(root)] == ["containerd", "k3s"]
    before = tree(root)
    done = configure(root)
    assert done.exit_code == 2
    assert "several containerd instances" in done.stderr and "--distro containerd|k3s" in done.stderr
    assert "Traceback" not in done.stderr and tree(root) == before
    chosen = configure(root, "--distro", "k3s")
    assert chosen.exit_code == 0, chosen.stderr
    assert (
        "using the containerd of k3s (config /var/lib/rancher/k3s/agent/etc/containerd/config.toml"
        in chosen.stderr
    )
    assert report(root, "--distro", "k3s")["distro"] == "k3s"


# -- k3s / RKE2: nothing written by default ---------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "state", "base", "restart"),
    [
        ("k3s-v2", "_before-toolkit", K3S, "restart k3s or k3s-agent"),
        ("k3s-v3", "_before-toolkit", K3S, "restart k3s or k3s-agent"),
        ("rke2", None, RKE2, "restart rke2-server or rke2-agent"),
        ("rke2/_v1.29.15-config-v2", None, RKE2, "restart rke2-server or rke2-agent"),
    ],
)
def test_k3s_and_rke2_get_no_containerd_file_and_the_regenerated_config_is_verified(
    tmp_path: Path, fixture: str, state: Optional[str], base: str, restart: str
) -> None:
    root = node(tmp_path, fixture, state=state)
    for tmpl in (
        "config.toml.tmpl",
        "config-v3.toml.tmpl",
    ):  # the fixtures' admin template is the pitfall below
        (root / base.lstrip("/") / tmpl).unlink(missing_ok=True)
    before = tree(root)
    done = configure(root)
    assert done.exit_code == 0, done.stderr
    assert "nothing written" in done.stdout and restart in done.stdout
    assert tree(root) == before  # never the generated config.toml
    facts = report(root)
    assert facts["distro"] == fixture.split("/")[0].split("-")[0] and restart in facts["restart"]
    if state == "_before-toolkit":
        failed = verify(root)
        assert failed.exit_code == 9 and restart in failed.stdout
        # The agent's restart: it regenerates config.toml with the nvidia runtime it found.
        shutil.copy(
            FIXTURES / fixture / base.lstrip("/") / "config.toml", root / base.lstrip("/") / "config.toml"
        )
    facts = report(root)
    assert (facts["runtime"], facts["runtime_path"], facts["systemd_cgroup"]) == ("nvidia", BINARY, True)
    checked = verify(root)
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    effective = loads(root, f"{base}/config.toml", tmp_path) if not oracle_missing() else None
    if effective is not None:
        assert effective.error == "" and effective.runtime["BinaryName"] == BINARY
    assert run_cli("configure", "revert", "--root", str(root)).exit_code == 1  # nothing of ours to revert


@pytest.mark.parametrize(
    ("fixture", "base", "tmpl"),
    [
        ("k3s-v2", K3S, "config.toml.tmpl"),
        ("k3s-v3", K3S, "config-v3.toml.tmpl"),
        ("rke2", RKE2, "config-v3.toml.tmpl"),
    ],
)
@needs_containerd
def test_a_template_that_redeclares_a_base_table_is_reported_and_containerd_refuses_its_result(
    tmp_path: Path, fixture: str, base: str, tmpl: str
) -> None:
    root = node(tmp_path, fixture)
    assert (root / base.lstrip("/") / tmpl).is_file()
    failed = verify(root)
    assert failed.exit_code == 9
    assert f"{tmpl} declares [plugins." in failed.stdout and "nvidia] again" in failed.stdout
    # What the agent writes after its restart with that template: containerd refuses it.
    after = node(tmp_path / "after", fixture, state="_after-restart-with-tmpl")
    config = after / base.lstrip("/") / "config.toml"
    binary = str(containerd_2()) if "version = 3" in config.read_text() else "containerd"
    refused = subprocess.run(
        [binary, "--config", str(config), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode != 0, "containerd accepted a redeclared table"
    assert "already exists" in refused.stderr or "duplicated tables" in refused.stderr, refused.stderr


# -- k3s / RKE2: what detection cannot give -----------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "state", "base", "written"),
    [
        ("k3s-v3", "_before-toolkit", K3S, "config-v3.toml.d/99-gpu-airgap-nvidia.toml"),
        ("k3s-v3", "_v1.32.2-no-imports", K3S, "config-v3.toml.tmpl"),
        ("k3s-v2", "_before-toolkit", K3S, "config.toml.tmpl"),
        ("rke2/_v1.29.15-config-v2", None, RKE2, "config.toml.tmpl"),
    ],
)
@needs_containerd
def test_another_runtime_name_goes_to_the_drop_in_dir_or_a_base_template_and_loads(
    tmp_path: Path, fixture: str, state: Optional[str], base: str, written: str
) -> None:
    root = node(tmp_path, fixture, state=state)
    for tmpl in ("config.toml.tmpl", "config-v3.toml.tmpl"):
        (root / base.lstrip("/") / tmpl).unlink(missing_ok=True)
    generated = root / base.lstrip("/") / "config.toml"
    base_text = generated.read_text()
    before = tree(root)
    done = configure(
        root, "--runtime-name", "nvidia-gpu", "--runtime-path", "/opt/nvidia/nvidia-container-runtime"
    )
    assert done.exit_code == 0, done.stderr
    target = root / base.lstrip("/") / written
    assert f"wrote {target}" in done.stdout
    text = target.read_text()
    assert "nvidia-gpu" in text and generated.read_text() == base_text  # the generated file untouched
    if written.endswith(".tmpl"):
        assert text.startswith('{{ template "base" . }}\n')
        generated.write_text(render_with_base(text, base_text))  # the agent's restart renders it
    effective = loads(root, f"{base}/config.toml", tmp_path)
    assert effective.error == "", effective.error
    assert "nvidia-gpu" in effective.runtimes
    again = configure(
        root, "--runtime-name", "nvidia-gpu", "--runtime-path", "/opt/nvidia/nvidia-container-runtime"
    )
    assert again.exit_code == 0 and "already configured" in again.stdout
    (root / "opt/nvidia").mkdir(parents=True)
    (root / "opt/nvidia/nvidia-container-runtime").write_text("#!/bin/sh\n")
    facts = report(root)
    assert (facts["runtime"], facts["runtime_path"]) == ("nvidia-gpu", "/opt/nvidia/nvidia-container-runtime")
    assert verify(root).exit_code == 0
    assert run_cli("configure", "revert", "--root", str(root)).exit_code == 0
    generated.write_text(base_text)  # the agent's restart after the revert renders the base again
    shutil.rmtree(root / "opt")
    assert tree(root) == before


def test_cdi_on_a_v2_k3s_without_a_drop_in_dir_is_refused_in_one_sentence(tmp_path: Path) -> None:
    root = node(tmp_path, "k3s-v2", state="_before-toolkit", drop=(f"{K3S}/config.toml.tmpl",))
    before = tree(root)
    done = configure(root, "--cdi", "on")
    assert done.exit_code == 2 and "CDI cannot be enabled" in done.stderr and tree(root) == before


def test_set_as_default_on_k3s_uses_the_agents_default_runtime_option(tmp_path: Path) -> None:
    root = node(tmp_path, "k3s-v3", drop=(f"{K3S}/config-v3.toml.tmpl",))
    before = tree(root)
    done = configure(root, "--set-as-default")
    assert done.exit_code == 0, done.stderr
    dropped = root / "etc/rancher/k3s/config.yaml.d/90-gpu-airgap.yaml"
    assert "default-runtime: nvidia" in dropped.read_text()
    assert run_cli("configure", "revert", "--root", str(root)).exit_code == 0
    assert tree(root) == before and not (root / "etc/rancher").exists()


# -- MicroK8s and k0s ---------------------------------------------------------------------------


@needs_containerd
def test_microk8s_template_gets_the_runtime_loads_in_containerd_and_reverts_byte_exact(
    tmp_path: Path,
) -> None:
    root = node(tmp_path, "microk8s")
    before = tree(root)
    done = configure(root)
    assert done.exit_code == 0, done.stderr
    template = root / MICROK8S.lstrip("/") / "containerd-template.toml"
    assert f"wrote {template}" in done.stdout and "snap.microk8s.daemon-containerd" in done.stdout
    text = template.read_text()
    assert (
        "${SNAPSHOTTER}" in text and "nvidia-container-runtime.options]" in text
    )  # the shipped handler kept
    # The snap's containerd service renders args/containerd.toml from the template when it starts.
    (root / MICROK8S.lstrip("/") / "containerd.toml").write_text(microk8s_render(text))
    effective = loads(root, f"{MICROK8S}/containerd.toml", tmp_path)
    assert effective.error == "" and effective.runtime["BinaryName"] == BINARY
    assert "nvidia-container-runtime" in effective.runtimes
    facts = report(root)
    assert (facts["distro"], facts["runtime"], facts["default"]) == ("microk8s", "nvidia", "runc")
    assert verify(root).exit_code == 0
    assert run_cli("configure", "revert", "--root", str(root)).exit_code == 0
    shutil.copy(
        FIXTURES / "microk8s" / MICROK8S.lstrip("/") / "containerd.toml",
        root / MICROK8S.lstrip("/") / "containerd.toml",
    )
    assert tree(root) == before


@pytest.mark.parametrize("with_admin_drop_in", [False, True])
@needs_containerd
def test_k0s_gets_a_version_3_drop_in_loads_in_containerd_2_and_reverts_byte_exact(
    tmp_path: Path, with_admin_drop_in: bool
) -> None:
    root = node(tmp_path, "k0s", drop=() if with_admin_drop_in else ("/etc/k0s/containerd.d/nvidia.toml",))
    before = tree(root)
    done = configure(root)
    assert done.exit_code == 0, done.stderr
    assert "k0s reloads containerd by itself" in done.stdout
    drop_in = (root / "etc/k0s/containerd.d/nvidia.toml").read_text()
    assert "version = 3" in drop_in and "io.containerd.grpc.v1.cri" not in drop_in  # k0s >= 1.36 pre-flight
    # The admin's drop-in is added to, never replaced (#24.7).
    added = "/etc/k0s/containerd.d/nvidia.toml was not written by gpu-airgap: adding the nvidia runtime to it"
    assert (added in done.stderr) is with_admin_drop_in
    assert (root / "etc/k0s/containerd.toml").read_bytes() == (
        FIXTURES / "k0s/etc/k0s/containerd.toml"
    ).read_bytes()
    effective = loads(root, "/etc/k0s/containerd.toml", tmp_path)
    assert effective.error == "" and effective.runtime["BinaryName"] == BINARY
    facts = report(root)
    assert (facts["distro"], facts["runtime"], facts["config_version"]) == ("k0s", "nvidia", 3)
    assert verify(root).exit_code == 0
    assert run_cli("configure", "revert", "--root", str(root)).exit_code == 0
    assert tree(root) == before


# -- the GPU Operator -----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["containerd", "rke2"])
def test_a_gpu_operator_node_is_refused_in_one_sentence_and_force_takes_over(
    tmp_path: Path, where: str
) -> None:
    root = node(tmp_path, "gpu-operator", toolkit=False)
    if where == "containerd":
        shutil.rmtree(root / "var")
    else:
        shutil.rmtree(root / "etc")
    before = tree(root)
    done = configure(root)
    assert done.exit_code == 5
    assert (
        done.stderr.count("\n") == 1
        and "managed by the NVIDIA GPU Operator" in done.stderr
        and "--force" in done.stderr
    )
    assert "/usr/local/nvidia/toolkit" in done.stderr and tree(root) == before
    assert report(root)["owner"] == "the NVIDIA GPU Operator"
    (root / BINARY.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / BINARY.lstrip("/")).write_text("#!/bin/sh\n")
    forced = configure(root, "--force")
    assert forced.exit_code == 0, forced.stderr
    assert "taking the runtime configuration over from the NVIDIA GPU Operator" in forced.stderr


# -- RuntimeClass: k3s deploys its own -------------------------------------------------------------


def test_configure_runtimeclass_on_k3s_emits_no_clashing_object_and_says_so(tmp_path: Path) -> None:
    root = node(tmp_path, "k3s-v3")
    done = run_cli("configure", "runtimeclass", "--root", str(root), "--output", "/etc/rc.yaml")
    assert done.exit_code == 0, done.stderr
    assert "k3s already deploys RuntimeClass nvidia" in done.stderr
    assert not (root / "etc/rc.yaml").exists() and done.stdout == ""
    other = run_cli(
        "configure", "runtimeclass", "--root", str(root), "--name", "nvidia", "--handler", "nvidia-gpu"
    )
    assert other.exit_code == 2 and "k3s deploys its own RuntimeClass nvidia" in other.stderr
    own = run_cli("configure", "runtimeclass", "--root", str(root), "--name", "gpu", "--handler", "nvidia")
    assert own.exit_code == 0 and "kind: RuntimeClass" in own.stdout
    plain = node(tmp_path / "plain", "microk8s")
    assert "kind: RuntimeClass" in run_cli("configure", "runtimeclass", "--root", str(plain)).stdout


def test_fleet_k8s_for_k3s_leaves_k3s_own_runtimeclass_alone_and_passes_the_distro(tmp_path: Path) -> None:
    args = (
        "fleet",
        "k8s",
        "--bundle-url",
        "http://127.0.0.1:1/b",
        "--bundle-sha256",
        "ab" * 32,
        "--keyring-configmap",
        "k",
    )
    done = run_cli(*args, "--distro", "k3s")
    assert done.exit_code == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert "RuntimeClass" not in [d["kind"] for d in docs]
    assert "k3s already deploys RuntimeClass nvidia" in done.stderr
    env = {
        e["name"]: e["value"]
        for d in docs
        if d["kind"] == "DaemonSet"
        for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GPU_AIRGAP_DISTRO"] == "k3s"
    plain = [d for d in yaml.safe_load_all(run_cli(*args).stdout) if d]
    assert "RuntimeClass" in [d["kind"] for d in plain]
    assert run_cli(*args, "--distro", "k3s", "--runtime-name", "nvidia-experimental").exit_code == 0


def test_the_gpu_operators_drop_in_is_recognised_as_its_registration(tmp_path: Path) -> None:
    root = node(tmp_path, "gpu-operator", toolkit=False)
    shutil.rmtree(root / "var")
    operator_config = root / "etc/containerd/config.toml"
    (root / "etc/containerd/conf.d").mkdir()
    operator_config.rename(
        root / "etc/containerd/conf.d/99-nvidia.toml"
    )  # gpu-operator >= 25.10 writes a drop-in
    operator_config.write_text('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    before = tree(root)
    done = configure(root)
    assert (
        done.exit_code == 5
        and "/etc/containerd/conf.d/99-nvidia.toml registers runtime nvidia" in done.stderr
    )
    assert tree(root) == before
