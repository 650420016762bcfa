"""Preflight names the node's system, its package manager and whether it is supported, from the real os-release.

The os-release files are the distributions' own (``tests/data/fixtures/os-release``, provenance in
its PROVENANCE.md). Each is placed in a scratch root where its distribution keeps it, beside a real
dpkg or rpm database, and read by the node detection; a dry-run ``install`` shows what preflight says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import pytest

from configure.nodefacts import detect_node
from configure.systems import NodeSystem
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import build_target, seed_dpkg_root, seed_rpm_root, write_signed_bundle

OS_RELEASES = Path(__file__).resolve().parent / "data" / "fixtures" / "os-release"
#: fixture -> (package format, where the distribution keeps the file, what preflight must say)
SYSTEMS = {
    "debian-13": ("deb", "/etc/os-release", NodeSystem("Debian 13", "apt", True)),
    "ubuntu-24.04": ("deb", "/etc/os-release", NodeSystem("Ubuntu 24.04", "apt", True)),
    "rhel-9.6": ("rpm", "/etc/os-release", NodeSystem("RHEL 9", "dnf", True)),
    "rhel-10.0": ("rpm", "/etc/os-release", NodeSystem("RHEL 10", "dnf", True)),
    "rocky-9.3": ("rpm", "/usr/lib/os-release", NodeSystem("Rocky Linux 9", "dnf", True)),
    "rocky-10.0": ("rpm", "/etc/os-release", NodeSystem("Rocky Linux 10", "dnf", True)),
    "almalinux-10.0": ("rpm", "/usr/lib/os-release", NodeSystem("AlmaLinux 10", "dnf", True)),
    "amzn-2023": ("rpm", "/etc/os-release", NodeSystem("Amazon Linux 2023", "dnf", True)),
    "centos-7": ("rpm", "/etc/os-release", NodeSystem("CentOS Linux 7", "yum", False)),
    "ubuntu-16.04": ("deb", "/etc/os-release", NodeSystem("Ubuntu 16.04", "apt", False)),
}


def _root_of(tmp_path: Path, fixture: str, fmt: str, where: str, *, libraries: bool = False) -> Path:
    """A scratch node with the fixture's os-release; ``libraries``: with the toolkit's node requirements."""
    root = tmp_path / "root"
    text = (OS_RELEASES / fixture).read_text()
    if fmt == "deb":
        seed_dpkg_root(root)
    elif libraries:
        seed_rpm_root(root, tmp_path / "seed")
    else:
        seed_rpm_root(root, tmp_path / "seed", libraries={})
    (root / "etc/os-release").unlink()
    placed = root / where.lstrip("/")
    placed.parent.mkdir(parents=True, exist_ok=True)
    placed.write_text(text)
    if where != "/etc/os-release":  # as these distributions ship it: /etc/os-release -> ../usr/lib/os-release
        (root / "etc/os-release").symlink_to("../usr/lib/os-release")
    return root


def _runner(argv: Sequence[str]) -> Optional[str]:
    return "amd64\n" if argv[0] == "dpkg" else "x86_64\n"


@pytest.mark.parametrize("fixture", sorted(SYSTEMS))
def test_each_real_os_release_names_system_package_manager_and_support(tmp_path: Path, fixture: str) -> None:
    fmt, where, expected = SYSTEMS[fixture]
    facts = detect_node(_root_of(tmp_path, fixture, fmt, where), _runner, lambda _name: None)
    assert facts.package_format == fmt
    assert facts.system == expected


def test_unsupported_system_gets_one_sentence_naming_what_is_supported() -> None:
    note = SYSTEMS["centos-7"][2].unsupported_note()
    assert note == (
        "CentOS Linux 7 is not a system gpu-airgap supports (supported: Ubuntu 20.04, 22.04, 24.04; "
        "Debian 11, 12, 13; RHEL 8, 9, 10; Rocky Linux 8, 9, 10; AlmaLinux 8, 9, 10; Amazon Linux 2023); "
        "the install goes ahead and dpkg or rpm decides whether the packages fit"
    )
    assert SYSTEMS["rhel-10.0"][2].unsupported_note() is None


@pytest.fixture(scope="module")
def bundle(test_key: TestKey, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("systems-bundle")
    targets = [
        build_target(out / "deb", "deb", "1.17.8-1", "amd64"),
        build_target(out / "rpm", "rpm", "1.17.8-1", "x86_64"),
    ]
    return write_signed_bundle(out / "bundle.tar", targets, test_key.home, test_key.fingerprint)


@pytest.mark.parametrize(
    ("fixture", "node"),
    [
        ("ubuntu-24.04", "Ubuntu 24.04 (apt), deb, amd64"),
        ("rocky-10.0", "Rocky Linux 10 (dnf), rpm, x86_64"),
        ("amzn-2023", "Amazon Linux 2023 (dnf), rpm, x86_64"),
        ("centos-7", "CentOS Linux 7 (yum, not supported), rpm, x86_64"),
        ("ubuntu-16.04", "Ubuntu 16.04 (apt, not supported), deb, amd64"),
    ],
)
def test_preflight_says_the_system_and_names_an_unsupported_one(
    tmp_path: Path, bundle: Path, test_key: TestKey, fixture: str, node: str
) -> None:
    fmt, where, expected = SYSTEMS[fixture]
    root = _root_of(tmp_path, fixture, fmt, where, libraries=True)
    result = run_cli(
        "install", str(bundle), "--keyring", str(test_key.public), "--root", str(root), "--dry-run"
    )
    assert result.exit_code == 0, result.stderr
    assert f" on {node}" in result.stdout.splitlines()[0]
    note = expected.unsupported_note()
    if note is None:
        assert "is not a system gpu-airgap supports" not in result.stdout
    else:
        assert f"  {note}" in result.stdout.splitlines()
    shown = run_cli("status", "--root", str(root), "--json")
    assert json.loads(shown.stdout)["system"] == {
        "name": expected.name,
        "package_manager": expected.package_manager,
        "supported": expected.supported,
    }
