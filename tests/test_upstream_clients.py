"""Real package managers accept the served upstream: a sandboxed apt-get and dnf, nothing on the host changes."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pkg_clients import apt, dnf_with_repo, new_apt_sandbox
from tests.upstream import (
    SigningKey,
    UpstreamServer,
    UpstreamTree,
    copy_upstream,
    make_wrong_key,
    resign_inrelease,
    resign_repomd,
    stop_agent,
)

HOST_APT_LISTS = Path("/var/lib/apt/lists")


@pytest.fixture(scope="module")
def wrong_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SigningKey]:
    key = make_wrong_key(tmp_path_factory.mktemp("wrong") / "gnupg")
    yield key
    stop_agent(key.gnupghome)


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    if not directory.is_dir():
        return {}
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def apt_sandbox(tmp_path: Path, tree: UpstreamTree, url: str) -> Path:
    sandbox = tmp_path / "apt"
    keyring = sandbox / "nvidia-container-toolkit-keyring.gpg"
    # NVIDIA's documented sed: add signed-by to the real .list, then point it at our server.
    text = (tree.root / "stable/deb/nvidia-container-toolkit.list").read_text()
    text = text.replace("deb https://", f"deb [signed-by={keyring}] https://")
    text = text.replace("https://nvidia.github.io/libnvidia-container", url)
    new_apt_sandbox(sandbox, tree.public_key.read_bytes(), text, keyring_name=keyring.name)
    return sandbox


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt-get is not installed")
def test_real_apt_get_updates_from_the_flat_repo_and_downloads_identical_debs(
    upstream_tree: UpstreamTree, upstream_server: UpstreamServer, tmp_path: Path
) -> None:
    before = snapshot(HOST_APT_LISTS)
    sandbox = apt_sandbox(tmp_path, upstream_tree, upstream_server.url)
    update = apt(sandbox, "update")
    assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, update.stdout + update.stderr
    assert {r.path for r in upstream_server.log} >= {
        "/stable/deb/amd64/InRelease",
        "/stable/deb/amd64/Packages.xz",
    }
    download = apt(sandbox, "download", "nvidia-container-toolkit=1.17.8-1", cwd=sandbox / "dl")
    assert download.returncode == 0, download.stderr
    name = "nvidia-container-toolkit_1.17.8-1_amd64.deb"
    assert (sandbox / "dl" / name).read_bytes() == (
        upstream_tree.deb_repo("stable", "amd64") / name
    ).read_bytes()
    assert snapshot(HOST_APT_LISTS) == before


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt-get is not installed")
def test_real_apt_get_rejects_an_inrelease_signed_by_another_key(
    upstream_tree: UpstreamTree, wrong_key: SigningKey, tmp_path: Path
) -> None:
    copy = copy_upstream(upstream_tree, tmp_path / "site")
    resign_inrelease(copy, copy.deb_repo("stable", "amd64"), key=wrong_key)
    with UpstreamServer(copy.root) as server:
        result = apt(apt_sandbox(tmp_path, copy, server.url), "update")
    output = result.stdout + result.stderr
    assert result.returncode == 100, output
    assert f"NO_PUBKEY {wrong_key.fingerprint[-16:]}" in output


def dnf(tmp_path: Path, tree: UpstreamTree, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """dnf confined to ``tmp_path`` with the tree's real .repo pointed at ``url`` (and its key file)."""
    text = (tree.root / "stable/rpm/nvidia-container-toolkit.repo").read_text()
    text = text.replace("https://nvidia.github.io/libnvidia-container/gpgkey", tree.public_key.as_uri())
    text = text.replace("https://nvidia.github.io/libnvidia-container", url)
    return dnf_with_repo(tmp_path / "dnf", text, *args)


@pytest.mark.skipif(shutil.which("dnf") is None, reason="dnf is not installed")
def test_real_dnf_accepts_the_yum_repo_with_repo_gpgcheck(
    upstream_tree: UpstreamTree, upstream_server: UpstreamServer, tmp_path: Path
) -> None:
    assert "repo_gpgcheck=1" in (upstream_tree.root / "stable/rpm/nvidia-container-toolkit.repo").read_text()
    result = dnf(
        tmp_path,
        upstream_tree,
        upstream_server.url,
        "repoquery",
        "--available",
        "--repo",
        "nvidia-container-toolkit",
    )
    assert result.returncode == 0, result.stderr
    found = set(result.stdout.split())
    assert "nvidia-container-toolkit-0:1.17.8-1.x86_64" in found
    assert "nvidia-docker2-0:2.14.0-1.noarch" in found
    assert "/stable/rpm/x86_64/repodata/repomd.xml.asc" in {r.path for r in upstream_server.log}


@pytest.mark.skipif(shutil.which("dnf") is None, reason="dnf is not installed")
def test_real_dnf_rejects_repomd_signed_by_another_key(
    upstream_tree: UpstreamTree, wrong_key: SigningKey, tmp_path: Path
) -> None:
    copy = copy_upstream(upstream_tree, tmp_path / "site")
    resign_repomd(copy, copy.rpm_repo("stable", "x86_64"), key=wrong_key)
    with UpstreamServer(copy.root) as server:
        result = dnf(
            tmp_path, copy, server.url, "repoquery", "--available", "--repo", "nvidia-container-toolkit"
        )
    assert result.returncode != 0
    assert "repomd.xml GPG signature verification error" in result.stderr, result.stderr
    assert "nvidia-container-toolkit-0:1.17.8-1.x86_64" not in result.stdout
