"""Toolkit 1.18+ CDI with NVIDIA's real 1.20.0 packages: the refresh units own the spec, one spec per kind, stale specs.

deb: NVIDIA's postinst enables ``nvidia-cdi-refresh.{path,service}`` in the debootstrap root
(deb-systemd-helper), so ``install`` writes no static spec even with a driver and reports the units
as the source. The spec the service would write is made by NVIDIA's own ``nvidia-ctk cdi generate``
run chrooted with the service's output variable; it runs in ``management`` mode, since the service's
NVML discovery needs a real GPU, over stand-in device nodes (``mknod``, the real numbers) and
stand-in driver libraries named for driver 550.54.14.

rpm: ``%post`` asks ``systemctl preset`` (recorded by the rpm world's stand-in systemctl), so the
units land disabled with NVIDIA's preset saying enable; the real ``systemctl --root R preset`` then
does what %post does on a live system, and the node's source follows.

``systemctl --root R is-enabled`` is the oracle for the enablement we read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict

import pytest

from configure.containerd.engine import ContainerdEngine
from plumbing.fsutil import rooted
from tests.cli_runner import install_argv, run_cli
from tests.gpgkeys import TestKey
from tests.test_node_debootstrap import debian_root, debian_tarball  # noqa: F401 (fixtures)
from tests.test_real_packages import (  # noqa: F401 (fixtures)
    deb_bundle,
    install,
    real_tree,
    rpm_bundle,
    rpm_root,
    rpm_world,
    with_containerd,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("systemctl") is None, reason="systemctl is not installed"),
]

UNITS = ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service")
DRIVER = "550.54.14"
LIBDIR = "usr/lib/x86_64-linux-gnu"
REFRESH_SPEC = "/var/run/cdi/nvidia.yaml"
STATIC_SPEC = "/etc/cdi/nvidia.yaml"


def is_enabled(root: Path) -> Dict[str, str]:
    out = subprocess.run(
        ["systemctl", "--root", str(root), "is-enabled", *UNITS], capture_output=True, text=True, check=False
    )
    return dict(zip(UNITS, out.stdout.split()))


def stand_in_driver(root: Path, version: str = DRIVER) -> None:
    """Device nodes with the real numbers, /proc's version line and empty driver libraries of ``version``."""
    for name, major, minor in (("nvidiactl", 195, 255), ("nvidia0", 195, 0), ("nvidia-uvm", 499, 0)):
        node = root / "dev" / name
        if not node.exists():
            os.mknod(node, 0o666 | 0o020000, os.makedev(major, minor))
    proc = root / "proc/driver/nvidia/version"
    proc.parent.mkdir(parents=True, exist_ok=True)
    proc.write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Release Build  (dvs-builder@U16)\n"
    )
    for lib in ("libcuda.so", "libnvidia-ml.so"):
        (root / LIBDIR / f"{lib}.{version}").write_bytes(b"")


def nvidia_ctk_generate(root: Path, output: str) -> None:
    """NVIDIA's nvidia-ctk writes a spec for nvidia.com/gpu inside the root, as the refresh service does (by variable)."""
    done = subprocess.run(
        [
            "chroot",
            str(root),
            "env",
            f"NVIDIA_CTK_CDI_OUTPUT_FILE_PATH={output}",
            "nvidia-ctk",
            "cdi",
            "generate",
            "--mode=management",
            "--vendor=nvidia.com",
            "--class=gpu",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and rooted(root, output).is_file(), (
        done.stderr
    )  # /var/run links to /run in the root


def verify_json(root: Path) -> Dict[str, Any]:
    result = run_cli("configure", "verify", "--root", str(root), "--runtime", "containerd", "--json")
    data: Dict[str, Any] = json.loads(result.stdout)
    data["exit_code"] = result.exit_code
    return data


def test_on_a_debian_node_with_120_the_refresh_units_are_the_cdi_source_and_install_writes_no_static_spec(
    debian_root: Path,  # noqa: F811
    deb_bundle: Path,  # noqa: F811
    operator_key: TestKey,
) -> None:
    with_containerd(debian_root)
    stand_in_driver(
        debian_root
    )  # a driver is there: before 1.18 install would have written /etc/cdi/nvidia.yaml
    installed = install(deb_bundle, operator_key, debian_root)
    assert installed.exit_code == 0, installed.stderr
    result = json.loads(installed.stdout)
    assert result["cdi_source"] == "nvidia-cdi-refresh"
    assert result["cdi"] == (
        f"from nvidia-cdi-refresh, which writes {REFRESH_SPEC} at boot and when the driver changes; gpu-airgap writes no static spec"
    )
    assert not (debian_root / STATIC_SPEC.lstrip("/")).exists()
    units = result["cdi_report"]["refresh"]["units"]
    assert {name: (u["path"], u["state"]) for name, u in units.items()} == {
        name: (f"/lib/systemd/system/{name}", "enabled") for name in UNITS
    }
    assert is_enabled(debian_root) == dict.fromkeys(UNITS, "enabled")  # systemd reads the root as we do
    assert (
        ContainerdEngine().report(debian_root, "nvidia")["CDI"] == "true"
    )  # the engine reads the spec it will get

    text = run_cli("status", "--root", str(debian_root))
    assert (
        "  CDI source: nvidia-cdi-refresh: the spec comes from nvidia-cdi-refresh, which writes "
        in text.stdout
    )

    # The service's spec lands: one spec for the kind, current, and status has nothing to say.
    nvidia_ctk_generate(debian_root, REFRESH_SPEC)
    status = run_cli("status", "--root", str(debian_root), "--json")
    report = json.loads(status.stdout)
    assert status.exit_code == 0 and report["problems"] == [], report["problems"]
    assert report["cdi"]["specs"] == [
        {"path": REFRESH_SPEC, "in_effect": True, "devices": ["all"], "stale": []}
    ]
    assert report["cdi"]["driver_version"] == DRIVER

    # configure cdi refuses to add a static spec next to the refresh units
    refused = run_cli("configure", "cdi", "--root", str(debian_root))
    assert refused.exit_code == 5 and refused.stdout == ""
    assert refused.stderr.startswith(
        f"gpu-airgap: error: nvidia-cdi-refresh is enabled under {debian_root} and writes "
    )
    assert not (debian_root / STATIC_SPEC.lstrip("/")).exists()


def test_a_static_spec_beside_the_refresh_spec_is_a_duplicate_and_a_spec_of_another_driver_is_stale(
    debian_root: Path,  # noqa: F811
    deb_bundle: Path,  # noqa: F811
    operator_key: TestKey,
) -> None:
    with_containerd(debian_root)
    stand_in_driver(debian_root)
    assert install(deb_bundle, operator_key, debian_root).exit_code == 0
    nvidia_ctk_generate(debian_root, REFRESH_SPEC)
    nvidia_ctk_generate(
        debian_root, STATIC_SPEC
    )  # someone ran `nvidia-ctk cdi generate --output=/etc/cdi/...` too

    verified = verify_json(debian_root)
    assert verified["exit_code"] == 9 and verified["cdi"]["source"] == "nvidia-cdi-refresh"
    assert verified["problems"] == [
        f"2 CDI specs define nvidia.com/gpu ({STATIC_SPEC}, {REFRESH_SPEC}): the runtime uses {REFRESH_SPEC} and "
        f"ignores {STATIC_SPEC} for the devices they share; keep one"
    ]
    assert [(s["path"], s["in_effect"]) for s in verified["cdi"]["specs"]] == [
        (STATIC_SPEC, False),
        (REFRESH_SPEC, True),
    ]

    # Remove the static one; then the driver is upgraded and a GPU is gone, and the refresh has not run yet.
    (debian_root / STATIC_SPEC.lstrip("/")).unlink()
    assert verify_json(debian_root)["exit_code"] == 0
    stand_in_driver(debian_root, "570.86.15")
    (debian_root / "dev/nvidia0").unlink()
    stale = verify_json(debian_root)
    assert stale["exit_code"] == 9
    assert stale["problems"] == [
        f"{REFRESH_SPEC} is stale: devices[0] (all).deviceNodes: /dev/nvidia0 does not exist on the node",
        f"{REFRESH_SPEC} is stale: it mounts libraries of driver {DRIVER}, but driver 570.86.15 is loaded",
    ]
    assert stale["cdi"]["specs"][0]["stale"] == [p.split(" is stale: ")[1] for p in stale["problems"]]


def test_on_an_rpm_node_the_units_wait_for_the_preset_and_then_own_the_spec(
    rpm_root: Path,  # noqa: F811
    rpm_bundle: Path,  # noqa: F811
    operator_key: TestKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_containerd(rpm_root)
    installed = install(rpm_bundle, operator_key, rpm_root)
    assert installed.exit_code == 0, installed.stderr
    result = json.loads(installed.stdout)
    units = result["cdi_report"]["refresh"]["units"]
    preset = "/usr/lib/systemd/system-preset/90-nvidia-container-toolkit.preset"
    assert {name: (u["path"], u["state"], u["preset"], u["preset_file"]) for name, u in units.items()} == {
        name: (f"/usr/lib/systemd/system/{name}", "disabled", "enable", preset) for name in UNITS
    }
    assert is_enabled(rpm_root) == dict.fromkeys(UNITS, "disabled")
    # the build of NVIDIA's tree after 1.20.0 ships the udev rule (the 1.20.1 row): it starts the service
    # when the driver loads, enabled or not, so the spec is the service's already
    assert result["cdi_report"]["refresh"]["udev_rule"] == "/usr/lib/udev/rules.d/99-nvidia-cdi-refresh.rules"
    assert result["cdi_source"] == "nvidia-cdi-refresh"
    # without the rule (the 1.20.0 release) the units wait for the preset
    (rpm_root / "usr/lib/udev/rules.d/99-nvidia-cdi-refresh.rules").unlink()
    monkeypatch.chdir(rpm_root.parent)
    before = json.loads(run_cli("status", "--root", rpm_root.name, "--json").stdout)
    assert before["cdi"]["source"] == "none"
    assert "the refresh units are installed but will not run" in before["cdi"]["summary"]

    # what NVIDIA's %post asks for, done by systemd's own systemctl on the root
    subprocess.run(
        ["systemctl", "--root", str(rpm_root), "--no-reload", "preset", *UNITS],
        check=True,
        capture_output=True,
    )
    assert is_enabled(rpm_root) == dict.fromkeys(UNITS, "enabled")
    status = json.loads(run_cli("status", "--root", rpm_root.name, "--json").stdout)
    assert status["cdi"]["source"] == "nvidia-cdi-refresh" and status["problems"] == []


def test_a_dry_run_foresees_the_refresh_units_and_cdi_off_still_names_them(
    debian_root: Path,  # noqa: F811
    deb_bundle: Path,  # noqa: F811
    operator_key: TestKey,
) -> None:
    with_containerd(debian_root)
    dry = run_cli(
        *install_argv(deb_bundle, operator_key, debian_root),
        "--runtime",
        "containerd",
        "--dry-run",
        "--json",
    )
    assert dry.exit_code == 0, dry.stderr
    planned = json.loads(dry.stdout)
    # the packages are not in yet: the release table says 1.20.0's -base ships and enables the units
    assert planned["cdi_source"] == "nvidia-cdi-refresh" and planned["cdi"].startswith(
        "from nvidia-cdi-refresh"
    )
    assert any(line.startswith("+") and "enable_cdi = true" in line for line in planned["diff"].splitlines())
    assert not (debian_root / "usr/bin/nvidia-ctk").exists()

    off = run_cli(
        *install_argv(deb_bundle, operator_key, debian_root),
        "--runtime",
        "containerd",
        "--cdi",
        "off",
        "--json",
    )
    assert off.exit_code == 0, off.stderr
    result = json.loads(off.stdout)
    assert result["cdi"] == (
        f"skipped: disabled with --cdi off; nvidia-cdi-refresh still writes {REFRESH_SPEC} (mask nvidia-cdi-refresh.service to stop it)"
    )
    assert result["cdi_source"] == "nvidia-cdi-refresh"  # what the node will really do
    assert ContainerdEngine().report(debian_root, "nvidia")["CDI"] == "false"


def test_the_static_spec_an_older_toolkit_got_from_us_is_retired_when_the_refresh_units_take_over(
    debian_root: Path,  # noqa: F811
    deb_bundle: Path,  # noqa: F811
    operator_key: TestKey,
) -> None:
    before = with_containerd(debian_root)
    stand_in_driver(debian_root)
    assert run_cli("configure", "cdi", "--root", str(debian_root)).exit_code == 0  # a 1.17 node's static spec
    static = rooted(debian_root, STATIC_SPEC)
    assert static.is_file()

    installed = install(deb_bundle, operator_key, debian_root)
    assert installed.exit_code == 0, installed.stderr
    result = json.loads(installed.stdout)
    assert (
        f"removed the static CDI spec gpu-airgap wrote earlier ({static}): nvidia-cdi-refresh owns the spec now"
        in result["messages"]
    )
    assert (
        not static.exists()
        and result["cdi_report"]["problems"] == []
        and result["cdi_source"] == "nvidia-cdi-refresh"
    )
    nvidia_ctk_generate(debian_root, REFRESH_SPEC)
    assert verify_json(debian_root)["exit_code"] == 0  # one spec for the kind
    assert run_cli("uninstall", "--root", str(debian_root)).exit_code == 0
    assert (debian_root / "etc/containerd/config.toml").read_bytes() == before
