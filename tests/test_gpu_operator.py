"""GPU Operator nodes: refused only where its toolkit owns the runtime; its driver container is the driver root.

Fixtures (``tests/data/fixtures/distros/gpu-operator*``, PROVENANCE.md): ``gpu-operator`` (toolkit enabled
and registered), ``gpu-operator-toolkit-disabled`` (``toolkit.enabled=false``: the runtimes removed, the
toolkit directory left behind) and ``gpu-operator-driver-container`` (the Operator's driver container
provides the driver, the toolkit is the host's).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from configure.cdi.node import cdi_report
from configure.driverroot import configured_root, detect_driver_root
from tests.cli_runner import run_cli
from tests.engine_oracle import nvidia_ctk
from tests.test_distros import BINARY, FIXTURES, configure, loads, needs_containerd, node, report, tree


def test_a_toolkit_directory_left_behind_with_nothing_registered_is_not_the_operators(tmp_path: Path) -> None:
    root = node(tmp_path, "gpu-operator-toolkit-disabled")
    assert (root / "usr/local/nvidia/toolkit/nvidia-container-runtime").is_file()
    done = configure(root)
    assert done.exit_code == 0, done.stderr
    assert "is left from the GPU Operator's toolkit, but no runtime is registered from it" in done.stderr
    assert report(root)["owner"] == ""


@needs_containerd
def test_the_toolkit_disabled_node_is_configured_and_containerd_loads_the_host_runtime(
    tmp_path: Path,
) -> None:
    root = node(tmp_path, "gpu-operator-toolkit-disabled")
    assert configure(root).exit_code == 0
    effective = loads(root, "/etc/containerd/config.toml", tmp_path)
    assert effective.error == "" and effective.runtime["BinaryName"] == BINARY


def test_the_operators_drop_in_is_its_registration_even_before_the_main_config_imports_it(
    tmp_path: Path,
) -> None:
    root = node(tmp_path, "gpu-operator-toolkit-disabled")
    (root / "etc/containerd/conf.d").mkdir()
    shutil.copy(
        FIXTURES / "gpu-operator/etc/containerd/config.toml", root / "etc/containerd/conf.d/99-nvidia.toml"
    )
    before = tree(root)
    done = configure(root)
    assert done.exit_code == 5 and "managed by the NVIDIA GPU Operator" in done.stderr
    assert (
        "/etc/containerd/conf.d/99-nvidia.toml registers runtime nvidia with /usr/local/nvidia/toolkit/"
        in done.stderr
    )
    assert tree(root) == before


# -- the Operator's driver container, the host's toolkit -------------------------------------------

DRIVER_ROOT = "/run/nvidia/driver"
TOOLKIT_CONFIG = "etc/nvidia-container-runtime/config.toml"


def test_the_driver_containers_validation_file_makes_run_nvidia_driver_the_driver_root(
    tmp_path: Path,
) -> None:
    root = node(tmp_path, "gpu-operator-driver-container")
    found = detect_driver_root(root)
    assert (found.path, found.dev_root, found.containerized) == (DRIVER_ROOT, DRIVER_ROOT, True)
    assert found.describe() == "/run/nvidia/driver (GPU Operator driver container)"
    ready = root / "run/nvidia/validations/driver-ready"
    ready.write_text(ready.read_text().replace("IS_HOST_DRIVER=false", "IS_HOST_DRIVER=true"))
    assert detect_driver_root(root).describe() == "/ (host)"
    ready.unlink()
    assert not detect_driver_root(root).containerized  # /run/nvidia/driver alone: not validated


def test_configure_sets_the_toolkits_driver_root_nvidia_ctk_reads_it_and_revert_undoes_it(
    tmp_path: Path,
) -> None:
    root = node(tmp_path, "gpu-operator-driver-container")
    before = tree(root)
    done = configure(root)
    assert done.exit_code == 0, done.stderr
    assert 'set [nvidia-container-cli] root = "/run/nvidia/driver"' in done.stderr
    text = (root / TOOLKIT_CONFIG).read_text()
    assert '#root = "/run/nvidia/driver"' in text and 'ldconfig = "@/sbin/ldconfig"' in text  # comments kept
    assert configured_root(root) == DRIVER_ROOT
    ctk = subprocess.run(
        [str(nvidia_ctk()), "config", "--config-file", str(root / TOOLKIT_CONFIG)],
        capture_output=True,
        text=True,
        check=True,
    )  # NVIDIA's own reader of the file renders the key it parsed
    assert 'root = "/run/nvidia/driver"' in [line.strip() for line in ctk.stdout.splitlines()]
    assert run_cli("configure", "revert", "--root", str(root)).exit_code == 0
    assert tree(root) == before


@needs_containerd
def test_the_driver_container_node_is_configured_and_containerd_loads_it(tmp_path: Path) -> None:
    root = node(tmp_path, "gpu-operator-driver-container")
    assert configure(root).exit_code == 0
    effective = loads(root, "/etc/containerd/config.toml", tmp_path)
    assert effective.error == "" and effective.runtime["BinaryName"] == BINARY


def test_the_cdi_spec_mounts_the_driver_containers_libraries_from_the_driver_root(tmp_path: Path) -> None:
    root = node(tmp_path, "gpu-operator-driver-container")
    done = run_cli("configure", "cdi", "--root", str(root))
    assert done.exit_code == 0, done.stderr
    spec = yaml.safe_load((root / "etc/cdi/nvidia.yaml").read_text())
    mounts = {m["containerPath"]: m["hostPath"] for m in spec["containerEdits"]["mounts"]}
    lib = "/usr/lib/x86_64-linux-gnu"
    assert mounts[f"{lib}/libcuda.so.550.54.15"] == f"{DRIVER_ROOT}{lib}/libcuda.so.550.54.15"
    assert mounts[f"{lib}/libnvidia-ml.so.550.54.15"] == f"{DRIVER_ROOT}{lib}/libnvidia-ml.so.550.54.15"
    gpu0 = next(d for d in spec["devices"] if d["name"] == "0")["containerEdits"]["deviceNodes"][0]
    assert gpu0 == {"path": "/dev/nvidia0", "hostPath": f"{DRIVER_ROOT}/dev/nvidia0"}
    verify = run_cli("configure", "verify", "--root", str(root)).stdout
    assert (
        "PROBLEM: the NVIDIA driver comes from the GPU Operator driver container at /run/nvidia/driver"
        in verify
    )
    assert not [p for p in cdi_report(root).problems if "nvidia.yaml is stale" in p]  # every host path exists


def test_status_names_the_driver_root_and_a_toolkit_that_does_not_look_there(tmp_path: Path) -> None:
    root = node(tmp_path, "gpu-operator-driver-container")
    status = run_cli("status", "--root", str(root))
    assert "driver root: /run/nvidia/driver (GPU Operator driver container)" in status.stdout
    assert "[nvidia-container-cli] root is /: run `gpu-airgap configure containerd`" in status.stdout
    assert configure(root).exit_code == 0
    assert "[nvidia-container-cli] root is" not in run_cli("status", "--root", str(root)).stdout
    host = node(tmp_path / "host", "gpu-operator-toolkit-disabled")
    assert "driver root: / (host)" in run_cli("status", "--root", str(host)).stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of the stand-in device nodes needs root")
def test_our_spec_names_the_driver_roots_paths_as_nvidias_nvidia_ctk_does(tmp_path: Path) -> None:
    root = node(tmp_path, "gpu-operator-driver-container")
    dev = root / "run/nvidia/driver/dev"
    for name, (major, minor) in {
        "nvidia0": (195, 0),
        "nvidia1": (195, 1),
        "nvidiactl": (195, 255),
        "nvidia-uvm": (511, 0),
        "nvidia-uvm-tools": (511, 1),
    }.items():
        (dev / name).unlink()
        os.mknod(dev / name, 0o600 | stat.S_IFCHR, os.makedev(major, minor))  # nvidia-ctk wants char devices
    assert run_cli("configure", "cdi", "--root", str(root)).exit_code == 0
    ours = yaml.safe_load((root / "etc/cdi/nvidia.yaml").read_text())
    driver = f"{root}{DRIVER_ROOT}"
    out = tmp_path / "nvidia-ctk.yaml"
    subprocess.run(
        [
            str(nvidia_ctk()),
            "cdi",
            "generate",
            "--mode=management",
            f"--driver-root={driver}",
            f"--dev-root={driver}",
            f"--output={out}",
        ],
        capture_output=True,
        check=True,
    )  # management mode: NVML discovery needs a real GPU
    theirs = yaml.safe_load(
        out.read_text().replace(str(root), "")
    )  # as nvidia-ctk on the node would name them

    def mounts(spec: dict) -> dict:  # type: ignore[type-arg]
        edits = [spec.get("containerEdits") or {}] + [d["containerEdits"] for d in spec["devices"]]
        return {
            m["containerPath"]: (m["hostPath"], m.get("options"))
            for e in edits
            for m in e.get("mounts") or []
        }

    def nodes(spec: dict) -> dict:  # type: ignore[type-arg]
        edits = [spec.get("containerEdits") or {}] + [d["containerEdits"] for d in spec["devices"]]
        return {n["path"]: n["hostPath"] for e in edits for n in e.get("deviceNodes") or []}

    assert mounts(ours) and mounts(ours).items() <= mounts(theirs).items()
    assert nodes(ours) and nodes(ours).items() <= nodes(theirs).items()
