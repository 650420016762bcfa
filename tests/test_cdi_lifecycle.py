"""The CDI spec's lifecycle: NVIDIA's udev rule as a spec source, a spec older than its driver, ``--refresh``.

The udev rule is the real one, out of the -base packages in tests/data/nvidia-from-source (built from
NVIDIA's tree after v1.20.0, which carries it: the 1.20.1 row of configure.releases).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from configure.cdi.refresh import detect_refresh
from configure.releases import REFRESH_SERVICE_UNIT, release_for
from tests.cli_runner import run_cli
from tests.test_cdi_refresh import BASE_DEB, BASE_RPM, needs_systemctl, systemctl, unpack

RULE = "99-nvidia-cdi-refresh.rules"
LIBS = "usr/lib/x86_64-linux-gnu"
SPEC = "etc/cdi/nvidia.yaml"


def extracted(tmp_path: Path, package: Path) -> Path:
    return unpack(package, tmp_path / "root")


def gpu_node(root: Path, version: str = "550.54.15") -> Path:
    """Device nodes (files stand in) and the host driver's libnvidia-ml under ``root``."""
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for name in ("nvidia0", "nvidiactl"):
        (root / "dev" / name).touch()
    (root / LIBS).mkdir(parents=True, exist_ok=True)
    (root / LIBS / f"libnvidia-ml.so.{version}").write_text("stand-in")
    return root


def configured(root: Path) -> Path:
    """containerd with the runtime registered, so ``configure verify`` gets to the CDI checks."""
    (root / "etc/containerd").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_text("")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-container-runtime").write_text("#!/bin/sh\n")
    (root / "usr/bin/nvidia-container-runtime").chmod(0o755)
    assert run_cli("configure", "containerd", "--root", str(root)).exit_code == 0
    return root


# -- the udev rule -----------------------------------------------------------------------------------


@needs_systemctl
def test_the_udev_rule_makes_the_refresh_service_the_spec_source_with_the_units_disabled(
    tmp_path: Path,
) -> None:
    root = extracted(tmp_path, BASE_DEB)  # dpkg-deb -x runs no postinst: both units disabled
    assert systemctl(root, "is-enabled", REFRESH_SERVICE_UNIT).stdout.strip() == "disabled"
    refresh = detect_refresh(root)
    assert refresh.udev_rule == f"/lib/udev/rules.d/{RULE}" and refresh.active
    assert refresh.describe().startswith(
        f"nvidia-cdi-refresh writes /var/run/cdi/nvidia.yaml when the driver loads (udev rule /lib/udev/rules.d/{RULE}"
    )
    assert refresh.to_dict()["udev_rule"] == f"/lib/udev/rules.d/{RULE}"
    gpu_node(root)
    refused = run_cli("configure", "cdi", "--root", str(root))
    assert refused.exit_code == 5
    assert "nvidia-cdi-refresh is started by its udev rule under" in refused.stderr
    assert "mask the service first (systemctl mask nvidia-cdi-refresh.service" in refused.stderr
    assert not (root / SPEC).exists()


def test_the_rpm_ships_the_rule_in_usr_lib(tmp_path: Path) -> None:
    assert detect_refresh(extracted(tmp_path, BASE_RPM)).udev_rule == f"/usr/lib/udev/rules.d/{RULE}"
    row = release_for("1.20.1-1")
    assert row is not None and row.refresh_udev_rule_dirs == ("/lib/udev/rules.d", "/usr/lib/udev/rules.d")
    assert release_for("1.20.0-1").refresh_udev_rule_dirs == ()  # type: ignore[union-attr]


@needs_systemctl
def test_a_rule_masked_in_etc_or_a_masked_service_is_no_spec_source(tmp_path: Path) -> None:
    root = extracted(tmp_path, BASE_DEB)
    etc = root / "etc/udev/rules.d"
    etc.mkdir(parents=True)
    (etc / RULE).symlink_to("/dev/null")  # udev(7): how an admin disables a vendor rule
    assert detect_refresh(root).udev_rule is None and not detect_refresh(root).active
    (etc / RULE).unlink()
    (etc / RULE).write_text('ACTION=="add", SUBSYSTEM=="module", KERNEL=="nvidia", RUN+="/bin/true"\n')
    assert detect_refresh(root).udev_rule is None  # the admin's file of that name hides NVIDIA's
    (etc / RULE).unlink()
    systemctl(root, "mask", REFRESH_SERVICE_UNIT)
    refresh = detect_refresh(root)
    assert refresh.udev_rule == f"/lib/udev/rules.d/{RULE}" and not refresh.active


# -- a spec older than its driver, and --refresh ------------------------------------------------------


def test_our_spec_names_its_driver_and_is_stale_after_an_upgrade_until_refresh_rewrites_it(
    tmp_path: Path,
) -> None:
    root = configured(gpu_node(tmp_path / "root", "535.161.08"))
    assert run_cli("configure", "cdi", "--root", str(root)).exit_code == 0
    assert (root / SPEC).read_text().startswith("# gpu-airgap: generated for NVIDIA driver 535.161.08\n")
    (root / LIBS / "libnvidia-ml.so.535.161.08").unlink()
    gpu_node(root, "550.54.15")  # the driver upgrade
    stale = "/etc/cdi/nvidia.yaml is stale: it was generated for driver 535.161.08, but driver 550.54.15 is installed"
    assert stale in run_cli("configure", "verify", "--root", str(root)).stdout
    assert stale in run_cli("status", "--root", str(root)).stdout
    plain = run_cli("configure", "cdi", "--root", str(root))  # without --refresh a valid spec is kept
    assert "kept the existing valid spec" in plain.stderr
    done = run_cli("configure", "cdi", "--root", str(root), "--refresh")
    assert done.exit_code == 0, done.stderr
    assert "refreshing /etc/cdi/nvidia.yaml: it was generated for driver 535.161.08" in done.stderr
    assert (root / SPEC).read_text().startswith("# gpu-airgap: generated for NVIDIA driver 550.54.15\n")
    assert "is stale" not in run_cli("status", "--root", str(root)).stdout
    assert run_cli("configure", "revert", "--root", str(root), "--runtime", "cdi").exit_code == 0
    assert not (root / SPEC).exists()  # revert restores the node as it was before the first spec


def test_a_spec_naming_no_driver_is_stale_when_older_than_the_installed_driver(tmp_path: Path) -> None:
    root = configured(gpu_node(tmp_path / "root"))
    (root / "etc/cdi").mkdir(parents=True)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
    }
    (root / SPEC).write_text(yaml.safe_dump(spec))  # someone else's, by hand: no driver named
    library = root / LIBS / "libnvidia-ml.so.550.54.15"
    assert "is stale" not in run_cli("configure", "verify", "--root", str(root)).stdout
    os.utime(root / SPEC, (library.stat().st_mtime - 3600,) * 2)  # the driver was installed after it
    assert (
        "/etc/cdi/nvidia.yaml is stale: it was written before driver 550.54.15 was installed "
        f"(/{LIBS}/libnvidia-ml.so.550.54.15 is newer)"
    ) in run_cli("configure", "verify", "--root", str(root)).stdout


def test_a_spec_of_another_driver_version_is_stale_by_version_not_by_time(tmp_path: Path) -> None:
    root = configured(gpu_node(tmp_path / "root"))
    (root / LIBS / "libcuda.so.535.161.08").write_text("old")
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
        "containerEdits": {
            "mounts": [
                {
                    "hostPath": f"/{LIBS}/libcuda.so.535.161.08",
                    "containerPath": f"/{LIBS}/libcuda.so.535.161.08",
                }
            ]
        },
    }
    (root / "etc/cdi").mkdir(parents=True)
    (root / SPEC).write_text(yaml.safe_dump(spec))  # newer than the library, and still of another driver
    verify = run_cli("configure", "verify", "--root", str(root)).stdout
    assert "it mounts libraries of driver 535.161.08, but driver 550.54.15 is installed" in verify


def test_refresh_needs_a_spec_and_leaves_the_refresh_units_spec_to_their_service(tmp_path: Path) -> None:
    root = gpu_node(tmp_path / "root")
    missing = run_cli("configure", "cdi", "--root", str(root), "--refresh")
    assert (
        missing.exit_code == 2 and "there is no CDI spec at /etc/cdi/nvidia.yaml to refresh" in missing.stderr
    )
    owned = gpu_node(extracted(tmp_path / "deb", BASE_DEB))
    refused = run_cli("configure", "cdi", "--root", str(owned), "--refresh")
    assert refused.exit_code == 5
    assert f"with `systemctl restart {REFRESH_SERVICE_UNIT}`" in refused.stderr
