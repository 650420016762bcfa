"""``bundle build`` needs no network but the upstream's: the node tool's wheels come with the package.

The python3.9 wheels the node zipapp carries are package data (``mirror/bundle/data/wheels``), each
pinned by its sha256 in ``node-wheels.txt``. gpu-airgap installed as ``pip install .`` installs it
(here into a directory of its own, from a copy of the tree) builds a bundle while pip cannot reach any
index, and refuses a vendored wheel that differs from its pin, in one sentence.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.bundle import verify
from mirror.bundle.zipapp import LOCK, WHEELS, pinned_wheels, vendored_wheels
from plumbing.errors import ExitCode, VerificationError
from plumbing.gpg import Keyring
from tests.cli_runner import bundle_build_argv
from tests.gpgkeys import TestKey
from tests.test_packaging import source_copy

CLICK = "click-8.1.8-py3-none-any.whl"


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_every_pin_has_its_vendored_wheel_and_its_digest() -> None:
    pins = pinned_wheels()
    wheels = vendored_wheels()
    assert [w.name.split("-")[0] for w in wheels] == [
        p.requirement.split("==")[0].replace("-", "_") for p in pins
    ]
    assert len(wheels) == len(list(WHEELS.glob("*.whl"))) == 7  # nothing vendored that is not pinned


def test_a_changed_missing_or_unhashed_wheel_is_refused_with_the_reason(tmp_path: Path) -> None:
    wheels = Path(shutil.copytree(WHEELS, tmp_path / "wheels"))
    _flip_a_byte(wheels / CLICK)
    with pytest.raises(
        VerificationError, match=rf"^the node wheel {CLICK} does not match its sha256 in "
    ) as e:
        vendored_wheels(wheels)
    assert e.value.exit_code == ExitCode.VERIFICATION_FAILED
    (wheels / CLICK).unlink()
    with pytest.raises(
        VerificationError, match=rf"^the node wheel click==8\.1\.8 is not in {wheels}; reinstall"
    ):
        vendored_wheels(wheels)
    lock = tmp_path / "node-wheels.txt"
    lock.write_text(LOCK.read_text().replace(" --hash=sha256:", " # "))
    with pytest.raises(VerificationError, match=r"pins no sha256"):
        vendored_wheels(WHEELS, lock)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """gpu-airgap as ``pip install .`` installs it (no dependencies, no index), in a directory of its own."""
    work = tmp_path_factory.mktemp("installed")
    src = source_copy(work / "src")
    site = work / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(site),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (site / "mirror/bundle/data/wheels" / CLICK).is_file()  # package data, installed with it
    return site


@pytest.fixture
def offline_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """pip pointed at an index on a 127.0.0.1 port where nothing listens, with no cache and no config."""
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
        yield {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path / "home"),
            "PIP_INDEX_URL": f"http://127.0.0.1:{dead.getsockname()[1]}/simple",
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_CACHE_DIR": "1",
            "PIP_RETRIES": "0",
            "PIP_TIMEOUT": "2",
            "GPU_AIRGAP_WHEEL_CACHE": str(tmp_path / "zipapp-cache"),
        }


def _build(
    site: Path, env: dict[str, str], mirror: Path, key: TestKey, out: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from mirror.cli import console; console()",
            *bundle_build_argv(mirror, key, out),
        ],
        env={**env, "PYTHONPATH": str(site)},
        cwd=out.parent,  # not the checkout: "-c" puts the working directory first on sys.path
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_an_installed_gpu_airgap_builds_a_bundle_while_pip_reaches_no_index(
    installed: Path, offline_env: dict[str, str], synced_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    fetch = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "-d",
            str(tmp_path / "dl"),
            "typer==0.23.1",
        ],
        env=offline_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert fetch.returncode != 0, "pip reached an index: this test would prove nothing"
    out = tmp_path / "bundle.tar.zst"
    built = _build(installed, offline_env, synced_mirror, operator_key, out)
    assert built.returncode == 0, built.stderr
    with Keyring.open([operator_key.public]) as keyring:
        assert verify(out, keyring).ok
    assert [p.suffix for p in Path(offline_env["GPU_AIRGAP_WHEEL_CACHE"]).iterdir()] == [
        ".pyz"
    ]  # no wheel fetched


@pytest.mark.slow
def test_an_installed_gpu_airgap_refuses_a_changed_vendored_wheel_and_writes_nothing(
    installed: Path, offline_env: dict[str, str], synced_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    site = Path(shutil.copytree(installed, tmp_path / "site"))
    _flip_a_byte(site / "mirror/bundle/data/wheels" / CLICK)
    out = tmp_path / "out" / "bundle.tar.zst"
    out.parent.mkdir()
    built = _build(site, offline_env, synced_mirror, operator_key, out)
    assert built.returncode == ExitCode.VERIFICATION_FAILED, built.stderr
    assert (
        f"the node wheel {CLICK} does not match its sha256 in {site}/mirror/bundle/data/node-wheels.txt"
        in built.stderr
    )
    assert "Traceback" not in built.stderr and list(out.parent.iterdir()) == []
