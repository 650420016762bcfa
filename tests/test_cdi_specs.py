"""Finding every CDI spec for nvidia.com/gpu on a root, resolving them as the CDI registry does, and staleness."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml

from configure.cdi.inventory import find_specs, specs_in_effect, stale_reasons
from configure.cdi.lifecycle import driver_version
from configure.releases import parse_version, release_for


def spec(*devices: str, mounts: Optional[List[str]] = None, kind: str = "nvidia.com/gpu") -> Dict[str, Any]:
    edits: Dict[str, Any] = {"deviceNodes": [{"path": "/dev/nvidiactl"}]}
    if mounts:
        edits["mounts"] = [{"hostPath": m, "containerPath": m} for m in mounts]
    return {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [
            {"name": d, "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{d}"}]}} for d in devices
        ],
        "containerEdits": edits,
    }


def put(root: Path, node_path: str, data: Any) -> None:
    path = root / node_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))


def devices(root: Path, *names: str) -> None:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / "dev" / name).touch()


def test_no_spec_directories_means_no_specs(tmp_path: Path) -> None:
    found = find_specs(tmp_path)
    assert found.files == () and not found.duplicates and found.duplicate_problem() is None
    assert specs_in_effect(tmp_path) == []


def test_a_refresh_spec_in_var_run_hides_a_static_one_in_etc_and_both_are_named(tmp_path: Path) -> None:
    put(tmp_path, "/etc/cdi/nvidia.yaml", spec("0", "all"))
    put(tmp_path, "/var/run/cdi/nvidia.yaml", spec("0", "all"))
    found = find_specs(tmp_path)
    assert [f.path for f in found.files] == ["/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"]
    assert found.providers == {"0": "/var/run/cdi/nvidia.yaml", "all": "/var/run/cdi/nvidia.yaml"}
    assert specs_in_effect(tmp_path) == ["/var/run/cdi/nvidia.yaml"]
    assert found.duplicate_problem() == (
        "2 CDI specs define nvidia.com/gpu (/etc/cdi/nvidia.yaml, /var/run/cdi/nvidia.yaml): the runtime uses "
        "/var/run/cdi/nvidia.yaml and ignores /etc/cdi/nvidia.yaml for the devices they share; keep one"
    )


def test_two_specs_in_one_directory_make_their_shared_devices_unusable(tmp_path: Path) -> None:
    put(tmp_path, "/etc/cdi/nvidia.yaml", spec("0", "all"))
    put(tmp_path, "/etc/cdi/nvidia.json", spec("0", "1"))
    found = find_specs(tmp_path)
    assert found.conflicts == ("0",)
    assert found.providers == {
        "1": "/etc/cdi/nvidia.json",
        "all": "/etc/cdi/nvidia.yaml",
    }  # .json is read first
    assert "unusable (nvidia.com/gpu=0)" in (found.duplicate_problem() or "")


def test_specs_of_other_kinds_and_other_files_are_not_ours(tmp_path: Path) -> None:
    put(tmp_path, "/etc/cdi/vendor.yaml", spec("x", kind="example.com/fpga"))
    put(tmp_path, "/etc/cdi/notes.txt", "not a spec")
    put(tmp_path, "/etc/cdi/nvidia.yaml", spec("0"))
    assert [f.path for f in find_specs(tmp_path).files] == ["/etc/cdi/nvidia.yaml"]


def test_a_broken_nvidia_file_is_reported_invalid_not_used(tmp_path: Path) -> None:
    put(tmp_path, "/var/run/cdi/nvidia.yaml", "kind: [unclosed\n")
    found = find_specs(tmp_path)
    assert found.files == () and [f.path for f in found.invalid] == ["/var/run/cdi/nvidia.yaml"]
    assert found.invalid[0].problems[0].startswith("not valid YAML")


def test_var_run_as_the_absolute_link_to_run_that_debian_has_is_followed_inside_the_root(
    tmp_path: Path,
) -> None:
    (tmp_path / "var").mkdir()
    (tmp_path / "var/run").symlink_to("/run")
    put(tmp_path, "/run/cdi/nvidia.yaml", spec("0"))
    assert specs_in_effect(tmp_path) == ["/var/run/cdi/nvidia.yaml"]


def test_a_spec_file_that_is_an_absolute_link_is_read_inside_the_root(tmp_path: Path) -> None:
    put(tmp_path, "/usr/share/cdi/nvidia.yaml", spec("0"))
    (tmp_path / "etc/cdi").mkdir(parents=True)
    (tmp_path / "etc/cdi/nvidia.yaml").symlink_to("/usr/share/cdi/nvidia.yaml")
    found = find_specs(tmp_path)
    assert [(f.path, f.kind, f.devices) for f in found.files] == [
        ("/etc/cdi/nvidia.yaml", "nvidia.com/gpu", ("0",))
    ]


def test_a_spec_naming_a_missing_device_node_is_stale(tmp_path: Path) -> None:
    devices(tmp_path, "nvidia0", "nvidiactl")
    put(tmp_path, "/etc/cdi/nvidia.yaml", spec("0", "1"))
    (only,) = find_specs(tmp_path).files
    assert stale_reasons(tmp_path, only, None) == [
        "devices[1] (1).deviceNodes: /dev/nvidia1 does not exist on the node"
    ]


def test_a_spec_made_for_another_driver_version_is_stale(tmp_path: Path) -> None:
    devices(tmp_path, "nvidia0", "nvidiactl")
    lib = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14"
    put(tmp_path, lib, "")
    put(tmp_path, "/etc/cdi/nvidia.yaml", spec("0", mounts=[lib]))
    put(
        tmp_path,
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)\n",
    )
    assert driver_version(tmp_path) == "570.86.15"
    (only,) = find_specs(tmp_path).files
    assert stale_reasons(tmp_path, only, "570.86.15") == [
        "it mounts libraries of driver 550.54.14, but driver 570.86.15 is loaded"
    ]
    assert stale_reasons(tmp_path, only, "550.54.14") == []  # the same spec on the driver it was made for


def test_a_device_node_with_other_numbers_than_the_spec_says_is_stale(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    (tmp_path / "dev").mkdir()
    os.mknod(tmp_path / "dev/nvidia-uvm", 0o666 | 0o020000, os.makedev(499, 0))
    data = spec()
    data["devices"] = [
        {
            "name": "0",
            "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia-uvm", "major": 498, "minor": 0}]},
        }
    ]
    data["containerEdits"] = {"env": ["A=b"]}
    put(tmp_path, "/etc/cdi/nvidia.yaml", data)
    (only,) = find_specs(tmp_path).files
    assert stale_reasons(tmp_path, only, None) == [
        "/dev/nvidia-uvm is device 499:0 on the node, the spec says 498:0"
    ]


@pytest.mark.parametrize(
    ("version", "label", "units"),
    [
        ("1.17.8-1", "1.14.0-1.17.9", False),
        ("1.13.5-1", "1.14.0-1.17.9", False),
        ("1.18.0~rc.1-1", "1.18.0", True),
        ("1.18.2-1", "1.18.1-1.19.99", True),
        ("1.20.0-1", "1.20.0", True),
        ("1.20.1-1", "1.20.1+", True),
        ("1.21.3-1", "1.20.1+", True),
    ],
)
def test_each_release_falls_in_one_row_of_the_table(version: str, label: str, units: bool) -> None:
    row = release_for(version)
    assert row is not None and row.label() == label and row.has_refresh_units is units and row.source
    assert row.exact_dependencies is (parse_version(version) >= (1, 18, 0))  # type: ignore[operator]


def test_the_1180_row_carries_the_config_d_bug_and_the_fix_row_does_not() -> None:
    assert release_for("1.18.0-1").containerd_drop_in == "/etc/containerd/config.d/99-nvidia.toml"  # type: ignore[union-attr]
    assert release_for("1.18.1-1").containerd_drop_in == "/etc/containerd/conf.d/99-nvidia.toml"  # type: ignore[union-attr]
    assert release_for("not a version") is None
