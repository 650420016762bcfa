"""Throwaway OpenPGP keys for signature tests: real gpg, real keys, generated once per session.

Import the fixtures into a test module (``from tests.gpgkeys import test_key, other_key``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.upstream import stop_agent

REAL = Path(__file__).parent / "data" / "real-upstream"
NVIDIA_KEY = REAL / "gpgkey"


@dataclass(frozen=True)
class TestKey:
    """A secret key in its own gpg home, and its exported public key file."""

    __test__ = False  # not a pytest class

    home: Path
    fingerprint: str
    public: Path


def make_key(home: Path, uid: str) -> TestKey:
    """Generate an unprotected ed25519 signing key in ``home`` and export its public half."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet"]
    subprocess.run(
        [*gpg, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"],
        check=True,
        capture_output=True,
    )
    listing = subprocess.run(
        [*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True
    )
    fingerprint = next(line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:"))
    public = home / "public.asc"
    public.write_bytes(
        subprocess.run([*gpg, "--armor", "--export", fingerprint], check=True, capture_output=True).stdout
    )
    return TestKey(home, fingerprint, public)


@pytest.fixture(scope="session")
def test_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestKey]:
    """The operator's throwaway signing key."""
    key = make_key(tmp_path_factory.mktemp("gpg-a"), "gpu-airgap test <test@example.invalid>")
    yield key
    stop_agent(key.home)


@pytest.fixture(scope="session")
def other_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestKey]:
    """A second key nobody trusts."""
    key = make_key(tmp_path_factory.mktemp("gpg-b"), "someone else <other@example.invalid>")
    yield key
    stop_agent(key.home)
