"""nvidia-cdi-refresh detection on a root, with NVIDIA's real 1.20.0 unit files and systemd's systemctl as the oracle.

The units come out of the real packages in tests/data/nvidia-from-source (``dpkg-deb -x``, and rpm
with ``--noscripts``, so only the files land); ``systemctl --root R enable|mask|preset`` makes the
enablement exactly as systemd does, and ``systemctl --root R is-enabled`` is what our reading must
agree with.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from configure.cdi.refresh import detect_refresh
from configure.engine import RuntimeOptions
from configure.podman.engine import PodmanEngine
from configure.releases import (
    REFRESH_OUTPUT,
    REFRESH_PATH_UNIT,
    REFRESH_SERVICE_UNIT,
    REFRESH_UNITS,
    release_for,
)
from tests.upstream import NVIDIA_BUILD, checked_build

BASE_DEB = NVIDIA_BUILD / "deb/amd64/nvidia-container-toolkit-base_1.20.0-1_amd64.deb"
BASE_RPM = NVIDIA_BUILD / "rpm/x86_64/nvidia-container-toolkit-base-1.20.0-1.x86_64.rpm"

needs_systemctl = pytest.mark.skipif(shutil.which("systemctl") is None, reason="systemctl is not installed")


def systemctl(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemctl", "--root", str(root), *args], capture_output=True, text=True, check=False
    )


def systemd_says(root: Path) -> Dict[str, str]:
    """``systemctl --root R is-enabled`` for both units."""
    out = systemctl(root, "is-enabled", *REFRESH_UNITS).stdout.split()
    return dict(zip(REFRESH_UNITS, out))


def we_say(root: Path) -> Dict[str, str]:
    refresh = detect_refresh(root)
    return {u.name: u.state for u in refresh.units}


def unpack(package: Path, root: Path) -> Path:
    """The files of one of NVIDIA's -base packages under ``root`` (no maintainer script runs)."""
    checked_build()  # in the repository: missing or changed fails here, it never skips
    root.mkdir(parents=True)
    if package.suffix == ".deb":
        subprocess.run(["dpkg-deb", "-x", str(package), str(root)], check=True)
        return root
    if shutil.which("rpm") is None:
        pytest.skip("rpm is not installed (make sysdeps installs it)")
    rpm = ["rpm", "--root", str(root), "--dbpath", "/var/lib/rpm", "-i", "--nodeps", "--noscripts"]
    subprocess.run([*rpm, str(package)], check=True, capture_output=True)
    return root


@pytest.fixture
def deb_root(tmp_path: Path) -> Path:
    return without_udev_rule(unpack(BASE_DEB, tmp_path / "deb-root"))


def without_udev_rule(root: Path) -> Path:
    """The units alone, as NVIDIA's 1.20.0 release shipped them.

    Our build of NVIDIA's later tree also carries the udev rule that starts the service whether or not
    it is enabled (the 1.20.1 row of configure.releases; tests/test_cdi_lifecycle.py): these tests are
    about the units' own states.
    """
    for directory in ("lib/udev/rules.d", "usr/lib/udev/rules.d"):
        (root / directory / "99-nvidia-cdi-refresh.rules").unlink(missing_ok=True)
    return root


@pytest.fixture
def rpm_root(tmp_path: Path) -> Path:
    return without_udev_rule(unpack(BASE_RPM, tmp_path / "rpm-root"))


def test_a_root_without_the_toolkit_has_no_refresh_units(tmp_path: Path) -> None:
    refresh = detect_refresh(tmp_path)
    assert not refresh.present and not refresh.active
    assert [u.state for u in refresh.units] == ["not-found", "not-found"]
    assert refresh.describe().startswith("no CDI refresh units")


@needs_systemctl
def test_the_real_deb_units_are_found_in_lib_and_read_as_systemd_reads_them(deb_root: Path) -> None:
    refresh = detect_refresh(deb_root)
    assert refresh.present and not refresh.active
    assert refresh.unit(REFRESH_SERVICE_UNIT).path == "/lib/systemd/system/nvidia-cdi-refresh.service"
    assert (
        we_say(deb_root)
        == systemd_says(deb_root)
        == {REFRESH_PATH_UNIT: "disabled", REFRESH_SERVICE_UNIT: "disabled"}
    )
    # the service's own Environment= line; NVIDIA's env file only has it commented out
    assert (refresh.output, refresh.output_from) == (
        REFRESH_OUTPUT,
        "/lib/systemd/system/nvidia-cdi-refresh.service",
    )


@needs_systemctl
def test_enabling_the_path_unit_makes_the_refresh_the_spec_source(deb_root: Path) -> None:
    systemctl(deb_root, "enable", REFRESH_PATH_UNIT)
    assert (
        we_say(deb_root)
        == systemd_says(deb_root)
        == {REFRESH_PATH_UNIT: "enabled", REFRESH_SERVICE_UNIT: "disabled"}
    )
    refresh = detect_refresh(deb_root)
    assert refresh.active
    assert refresh.unit(REFRESH_PATH_UNIT).links == (
        "/etc/systemd/system/multi-user.target.wants/nvidia-cdi-refresh.path",
    )
    assert refresh.describe().startswith(f"nvidia-cdi-refresh writes {REFRESH_OUTPUT} at boot")


@needs_systemctl
def test_a_masked_service_never_writes_a_spec_even_with_the_path_unit_enabled(deb_root: Path) -> None:
    systemctl(deb_root, "enable", REFRESH_PATH_UNIT)
    systemctl(deb_root, "mask", REFRESH_SERVICE_UNIT)
    assert (
        we_say(deb_root)
        == systemd_says(deb_root)
        == {REFRESH_PATH_UNIT: "enabled", REFRESH_SERVICE_UNIT: "masked"}
    )
    assert not detect_refresh(deb_root).active


@needs_systemctl
def test_the_real_rpm_preset_enables_both_units_as_systemctl_preset_does(rpm_root: Path) -> None:
    before = detect_refresh(rpm_root)
    preset = "/usr/lib/systemd/system-preset/90-nvidia-container-toolkit.preset"
    assert [(u.state, u.preset, u.preset_file) for u in before.units] == [("disabled", "enable", preset)] * 2
    assert not before.active and "the vendor preset would enable them" in before.describe()
    assert release_for("1.20.0-1") is not None and release_for("1.20.0-1").refresh_preset == preset  # type: ignore[union-attr]

    systemctl(rpm_root, "preset", *REFRESH_UNITS)  # what NVIDIA's %post asks for
    assert (
        we_say(rpm_root)
        == systemd_says(rpm_root)
        == {REFRESH_PATH_UNIT: "enabled", REFRESH_SERVICE_UNIT: "enabled"}
    )
    assert detect_refresh(rpm_root).active


@needs_systemctl
def test_a_disable_line_in_an_etc_preset_file_wins_over_the_vendor_preset(rpm_root: Path) -> None:
    etc = rpm_root / "etc/systemd/system-preset"
    etc.mkdir(parents=True)
    (etc / "10-site.preset").write_text("disable nvidia-cdi-*\n")
    assert {u.preset for u in detect_refresh(rpm_root).units} == {"disable"}
    systemctl(rpm_root, "preset", *REFRESH_UNITS)
    assert (
        we_say(rpm_root)
        == systemd_says(rpm_root)
        == {REFRESH_PATH_UNIT: "disabled", REFRESH_SERVICE_UNIT: "disabled"}
    )


def test_the_env_file_moves_the_spec_the_service_writes(deb_root: Path) -> None:
    env = deb_root / "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
    env.write_text(env.read_text() + "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml\n")
    refresh = detect_refresh(deb_root)
    assert (refresh.output, refresh.output_from) == (
        "/etc/cdi/nvidia.yaml",
        "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env",
    )


def test_units_in_etc_systemd_system_as_118_and_119_ship_them_are_found_there(deb_root: Path) -> None:
    etc = deb_root / "etc/systemd/system"
    etc.mkdir(parents=True, exist_ok=True)
    for unit in REFRESH_UNITS:
        (deb_root / "lib/systemd/system" / unit).rename(etc / unit)
    wants = etc / "multi-user.target.wants"
    wants.mkdir()
    (wants / REFRESH_PATH_UNIT).symlink_to(f"/etc/systemd/system/{REFRESH_PATH_UNIT}")
    refresh = detect_refresh(deb_root)
    assert refresh.unit(REFRESH_PATH_UNIT).path == "/etc/systemd/system/nvidia-cdi-refresh.path"
    assert refresh.active
    assert release_for("1.19.1-1").refresh_unit_dirs == ("/etc/systemd/system",)  # type: ignore[union-attr]


@needs_systemctl
def test_podman_writes_no_static_spec_where_the_refresh_units_own_it(deb_root: Path) -> None:
    (deb_root / "dev").mkdir()
    for name in ("nvidia0", "nvidiactl"):
        (
            deb_root / "dev" / name
        ).touch()  # a driver: without the units podman's plan would write /etc/cdi/nvidia.yaml
    without = PodmanEngine(version=lambda root: (5, 0)).plan(RuntimeOptions(root=deb_root, cdi=True))
    assert [c.path.name for c in without.changes] == ["nvidia.yaml"]
    systemctl(deb_root, "enable", REFRESH_PATH_UNIT)
    plan = PodmanEngine(version=lambda root: (5, 0)).plan(RuntimeOptions(root=deb_root, cdi=True))
    assert plan.changes == [] and plan.facts["CDI_SPEC"] == REFRESH_OUTPUT
    assert plan.warnings[-1].startswith(f"no static spec written: nvidia-cdi-refresh writes {REFRESH_OUTPUT}")
