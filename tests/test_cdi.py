"""CDI specs: built from device nodes under the root, validated, never replaced without --force."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml

from configure.cdi.spec import (
    CDI_SPEC,
    NoGpuDevices,
    NvidiaCtkGenerator,
    build_spec,
    plan_spec,
    validate_spec,
)
from configure.journal import Journal, apply_changes
from plumbing.errors import ConfigFormatError, ExitCode, ToolError, UsageError
from plumbing.fsutil import rooted
from tests.cli_runner import run_cli


def _devices(root: Path, *names: str) -> Path:
    dev = root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    for name in names:
        (dev / name).touch()  # plain files stand in for device nodes
    return root


def _write(root: Path) -> Dict[str, Any]:
    plan = plan_spec(root, use_installed=False)
    apply_changes("cdi", plan.changes, Journal(root), dict(plan.notes))
    return dict(yaml.safe_load(rooted(root, CDI_SPEC).read_bytes()))


def test_two_gpus_give_devices_0_1_and_all_with_control_nodes_shared(tmp_path: Path) -> None:
    root = _devices(
        tmp_path, "nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"
    )
    spec = _write(root)
    assert spec["cdiVersion"] == "0.5.0"
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "all"]
    assert spec["devices"][1]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia1", "hostPath": "/dev/nvidia1"}
    ]
    assert [n["path"] for n in spec["devices"][2]["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia0",
        "/dev/nvidia1",
    ]
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    ]
    assert validate_spec(spec) == []
    assert stat.S_IMODE(rooted(root, CDI_SPEC).stat().st_mode) == 0o644


def test_the_spec_sets_nvidia_visible_devices_void_so_the_legacy_hook_adds_no_devices(tmp_path: Path) -> None:
    spec = _write(_devices(tmp_path, "nvidia0", "nvidiactl"))
    # Without it, nvidia-container-runtime's legacy mode would inject every GPU on top of the CDI devices.
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]


@pytest.mark.parametrize("reverse", [False, True], ids=["listed-a-to-z", "listed-z-to-a"])
def test_gpu_indices_sort_numerically_whatever_order_the_directory_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reverse: bool
) -> None:
    root = _devices(tmp_path, "nvidia10", "nvidia2", "nvidia1", "nvidiactl")
    (root / "dev/nvidia3").mkdir()  # a directory is not a device node
    listed: List[Path] = []
    real_iterdir = Path.iterdir

    def iterdir_in_order(self: Path) -> Iterator[Path]:
        # The filesystem's own order is whatever it is; both name orders put nvidia10 in the wrong place.
        entries = sorted(real_iterdir(self), key=lambda p: p.name, reverse=reverse)
        listed.append(self)
        return iter(entries)

    monkeypatch.setattr(Path, "iterdir", iterdir_in_order)
    assert [d["name"] for d in _write(root)["devices"]] == ["1", "2", "10", "all"]
    assert root / "dev" in listed  # the listing this test orders is the one the spec was built from


@pytest.mark.parametrize("names", [(), ("nvidiactl", "nvidia-uvm")], ids=["empty-dev", "control-only"])
def test_no_gpu_device_nodes_is_a_clear_error_and_writes_nothing(
    tmp_path: Path, names: tuple[str, ...]
) -> None:
    root = _devices(tmp_path, *names)
    with pytest.raises(NoGpuDevices, match=r"no GPU device nodes \(nvidia0, nvidia1, \.\.\.\) found in"):
        plan_spec(root, use_installed=False)
    result = run_cli("configure", "cdi", "--root", str(root))
    assert result.exit_code == ExitCode.ERROR
    assert result.stderr.count("\n") == 1 and "load the NVIDIA driver" in result.stderr
    assert not rooted(root, CDI_SPEC).exists()


def test_second_run_is_already_configured(tmp_path: Path) -> None:
    root = _devices(tmp_path, "nvidia0", "nvidiactl")
    _write(root)
    assert not plan_spec(root, use_installed=False).changed


def test_a_valid_existing_spec_is_kept_without_force_and_replaced_with_it(tmp_path: Path) -> None:
    root = _devices(tmp_path, "nvidia0", "nvidia1", "nvidiactl")
    theirs = build_spec([(0, "/dev/nvidia0")], [])
    theirs["containerEdits"]["env"].append("SITE=1")
    path = rooted(root, CDI_SPEC)
    path.parent.mkdir(parents=True)
    original = yaml.safe_dump(theirs).encode()  # sorted keys: the facts report the file's own order
    path.write_bytes(original)
    plan = plan_spec(root, use_installed=False)
    assert not plan.changed
    assert plan.facts["EXISTING_KEYS"] == "cdiVersion,containerEdits,devices,kind"
    assert plan.facts["EXISTING_VALID"] == "true"
    assert any("use --force to replace it" in w for w in plan.warnings)
    forced = plan_spec(root, force=True, use_installed=False)
    apply_changes("cdi", forced.changes, Journal(root))
    assert [d["name"] for d in yaml.safe_load(path.read_bytes())["devices"]] == ["0", "1", "all"]


def test_an_invalid_existing_spec_is_reported_and_replaced_only_with_force(tmp_path: Path) -> None:
    root = _devices(tmp_path, "nvidia0")
    path = rooted(root, CDI_SPEC)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"cdiVersion: 9.9.9\nkind: nvidia.com/gpu\ndevices: []\n")
    with pytest.raises(
        ConfigFormatError,
        match=r"cdiVersion '9.9.9' is not a known CDI version .*; devices must be a non-empty list",
    ):
        plan_spec(root, use_installed=False)
    result = run_cli("configure", "cdi", "--root", str(root))
    assert result.exit_code == ExitCode.CONFIG and "use --force to replace it" in result.stderr
    assert path.read_bytes() == b"cdiVersion: 9.9.9\nkind: nvidia.com/gpu\ndevices: []\n"
    result = run_cli("configure", "cdi", "--root", str(root), "--force", "--json")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert out["facts"]["existing_valid"] is False and out["facts"]["devices"] == "0,all"
    assert validate_spec(yaml.safe_load(path.read_bytes())) == []


def _valid() -> Dict[str, Any]:
    spec = build_spec([(0, "/dev/nvidia0")], ["/dev/nvidiactl"])
    spec["containerEdits"]["mounts"] = [
        {"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1"}
    ]
    spec["containerEdits"]["hooks"] = [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook"}]
    return spec


def _broken(edit: str) -> Any:
    spec = _valid()
    edits = spec["containerEdits"]
    if edit == "no-version":
        del spec["cdiVersion"]
    elif edit == "unknown-version":
        spec["cdiVersion"] = "0.2.0"
    elif edit == "no-kind":
        del spec["kind"]
    elif edit == "kind-syntax":
        spec["kind"] = "nvidia.com"
    elif edit == "other-kind":
        spec["kind"] = "amd.com/gpu"
    elif edit == "bad-name":
        spec["devices"][0]["name"] = "-gpu 0"
    elif edit == "duplicate-name":
        spec["devices"].append(copy.deepcopy(spec["devices"][0]))
    elif edit == "no-devices":
        spec["devices"] = []
    elif edit == "empty-device-edits":
        spec["devices"][0]["containerEdits"] = {}
    elif edit == "env-not-key-value":
        edits["env"] = ["NVIDIA_VISIBLE_DEVICES"]
    elif edit == "node-without-path":
        edits["deviceNodes"] = [{"hostPath": "/dev/nvidiactl"}]
    elif edit == "mount-without-container-path":
        edits["mounts"] = [{"hostPath": "/usr/lib/libcuda.so.1"}]
    elif edit == "hook-without-name":
        edits["hooks"] = [{"path": "/usr/bin/nvidia-cdi-hook"}]
    elif edit == "hook-unknown-stage":
        edits["hooks"][0]["hookName"] = "beforeEverything"
    elif edit == "edits-not-mapping":
        spec["containerEdits"] = ["env"]
    elif edit == "not-a-mapping":
        return ["cdiVersion"]
    return spec


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ("no-version", "cdiVersion is missing"),
        ("unknown-version", "cdiVersion '0.2.0' is not a known CDI version"),
        ("no-kind", "kind is missing"),
        ("kind-syntax", "kind 'nvidia.com' is not of the form vendor/class"),
        ("other-kind", "kind is 'amd.com/gpu', not 'nvidia.com/gpu'"),
        ("bad-name", "devices[0].name '-gpu 0' is not a valid CDI device name"),
        ("duplicate-name", "devices[2].name '0' is used twice"),
        ("no-devices", "devices must be a non-empty list"),
        ("empty-device-edits", "devices[0].containerEdits is missing or empty"),
        ("env-not-key-value", "containerEdits.env must be a list of KEY=VALUE strings"),
        ("node-without-path", "containerEdits.deviceNodes[0] lacks path"),
        ("mount-without-container-path", "containerEdits.mounts[0] lacks containerPath"),
        ("hook-without-name", "containerEdits.hooks[0] lacks hookName"),
        (
            "hook-unknown-stage",
            "containerEdits.hooks[0].hookName 'beforeEverything' is not an OCI hook stage",
        ),
        ("edits-not-mapping", "containerEdits is not a mapping"),
        ("not-a-mapping", "the spec is not a YAML mapping"),
    ],
)
def test_validate_spec_names_each_problem(edit: str, problem: str) -> None:
    assert validate_spec(_valid()) == []
    assert any(problem in found for found in validate_spec(_broken(edit)))


def test_validate_spec_lists_every_problem_at_once() -> None:
    spec = _valid()
    spec["kind"] = "amd.com/gpu"
    spec["devices"][0]["name"] = "_x"
    del spec["cdiVersion"]
    assert len(validate_spec(spec)) == 3


def test_binaries_under_another_root_are_never_run(tmp_path: Path) -> None:
    root = _devices(tmp_path, "nvidia0")
    marker = tmp_path / "ran"
    ctk = rooted(root, "/usr/bin/nvidia-ctk")
    ctk.parent.mkdir(parents=True)
    ctk.write_text(f"#!/bin/sh\ntouch {marker}\n")
    ctk.chmod(0o755)
    plan = plan_spec(root)
    assert plan.facts["SOURCE"] == "device-nodes"
    assert any("is not run" in w for w in plan.warnings)
    assert not marker.exists()


class _Generator:
    name = "fake-ctk"

    def __init__(self, output: bytes = b"", fail: bool = False) -> None:
        self.output = output
        self.fail = fail

    def generate(self) -> bytes:
        if self.fail:
            raise ToolError("nvidia-ctk exited with status 1: failed to initialize NVML")
        return self.output


def test_a_generator_spec_is_written_verbatim_after_validation(tmp_path: Path) -> None:
    raw = yaml.safe_dump(_valid()).encode()
    plan = plan_spec(tmp_path, generator=_Generator(raw))
    assert plan.changes[0].new == raw
    assert plan.facts["SOURCE"] == "fake-ctk"
    with pytest.raises(ToolError, match="fake-ctk produced an invalid CDI spec: kind is missing"):
        plan_spec(
            tmp_path,
            generator=_Generator(b"cdiVersion: 0.5.0\ndevices: [{name: a, containerEdits: {env: [A=1]}}]\n"),
        )


def test_a_failing_generator_falls_back_to_device_nodes(tmp_path: Path) -> None:
    root = _devices(tmp_path, "nvidia0")
    plan = plan_spec(root, generator=_Generator(fail=True))
    assert plan.facts["SOURCE"] == "device-nodes"
    assert any("failed to initialize NVML" in w for w in plan.warnings)


def test_nvidia_ctk_is_called_with_an_output_file_and_its_spec_read_back(tmp_path: Path) -> None:
    # A stand-in nvidia-ctk that behaves like the real one: writes the spec to --output=FILE.
    argv_log = tmp_path / "argv"
    script = tmp_path / "nvidia-ctk"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {argv_log}\n'
        'out="${3#--output=}"\n'
        'printf "cdiVersion: 0.5.0\\nkind: nvidia.com/gpu\\n" > "$out"\n'
    )
    script.chmod(0o755)
    assert NvidiaCtkGenerator(str(script)).generate() == b"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n"
    args: List[str] = argv_log.read_text().split()
    assert args[:2] == ["cdi", "generate"] and args[2].startswith("--output=") and args[2].endswith(".yaml")
    assert not os.path.exists(args[2][len("--output=") :])  # the temp directory is cleaned up


def test_cli_writes_once_then_says_already_configured(tmp_path: Path) -> None:
    root = _devices(tmp_path, "nvidia0", "nvidiactl")
    first = run_cli("configure", "cdi", "--root", str(root))
    assert first.exit_code == 0
    assert "DEVICES=0,all" in first.stdout and "KIND=nvidia.com/gpu" in first.stdout
    second = run_cli("configure", "cdi", "--root", str(root))
    assert second.exit_code == 0 and "already configured" in second.stdout
    # a second spec for the kind elsewhere is refused, even as a dry run: one spec per kind
    second_spec = run_cli(
        "configure", "cdi", "--root", str(root), "--output", "/var/run/cdi/nvidia.yaml", "--dry-run"
    )
    assert second_spec.exit_code == ExitCode.CONFIG and second_spec.stdout == ""
    assert second_spec.stderr == (
        "gpu-airgap: error: /etc/cdi/nvidia.yaml already defines nvidia.com/gpu, so a spec at /var/run/cdi/nvidia.yaml "
        "would be a second one for the same devices; remove it, or replace it with `gpu-airgap configure cdi --output /etc/cdi/nvidia.yaml --force`\n"
    )
    assert not rooted(root, "/var/run/cdi/nvidia.yaml").exists()


def test_a_custom_output_path_works_where_no_other_spec_defines_the_kind(tmp_path: Path) -> None:
    root = _devices(tmp_path, "nvidia0", "nvidiactl")
    custom = run_cli(
        "configure", "cdi", "--root", str(root), "--output", "/var/run/cdi/nvidia.yaml", "--dry-run"
    )
    assert custom.exit_code == 0 and "+kind: nvidia.com/gpu" in custom.stdout
    assert not rooted(root, "/var/run/cdi/nvidia.yaml").exists()


def test_a_json_output_gets_a_json_spec(tmp_path: Path) -> None:
    root = _devices(tmp_path, "nvidia0")
    plan = plan_spec(root, "/etc/cdi/nvidia.json", use_installed=False)
    assert json.loads(plan.changes[0].new)["kind"] == "nvidia.com/gpu"
    raw = yaml.safe_dump(_valid()).encode()
    assert (
        json.loads(plan_spec(root, "/etc/cdi/nvidia.json", generator=_Generator(raw)).changes[0].new)
        == _valid()
    )


@pytest.mark.parametrize("output", ["nvidia.yaml", "/etc/cdi/nvidia.yml", "/etc/cdi/nvidia"])
def test_an_output_cdi_would_never_read_is_refused(tmp_path: Path, output: str) -> None:
    with pytest.raises(UsageError, match=r"absolute path ending in \.yaml or \.json"):
        plan_spec(_devices(tmp_path, "nvidia0"), output, use_installed=False)


def test_a_valid_existing_spec_is_kept_when_the_gpus_are_not_visible(tmp_path: Path) -> None:
    root = _devices(tmp_path, "nvidia0")
    _write(root)
    (root / "dev/nvidia0").unlink()
    plan = plan_spec(root, use_installed=False)
    assert not plan.changed and plan.facts["SOURCE"] == "existing"
    assert any("has no GPU device nodes; kept the existing valid spec" in w for w in plan.warnings)
    with pytest.raises(NoGpuDevices):
        plan_spec(root, force=True, use_installed=False)
