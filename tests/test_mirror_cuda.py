"""``mirror sync --upstream cuda:…``: the toolkit's chain out of a CUDA download repository.

The repository is tests/upstream/cuda.py's: NVIDIA's flat apt layout with the loopback upstream's
toolkit packages among 3,000 synthetic CUDA packages, signed with a CUDA test key of its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.disk.store import MirrorState
from mirror.index.apt import iter_packages
from mirror.sync import cuda
from tests.cli_runner import run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.test_publish import publish
from tests.upstream import UpstreamServer, UpstreamTree, stop_agent
from tests.upstream.cuda import build_cuda_repo, build_cuda_yum_repo
from tests.upstream.keys import SigningKey, generate_key

REPO = "compute/cuda/repos/ubuntu2204/x86_64"


@pytest.fixture(scope="module")
def cuda_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SigningKey]:
    home = tmp_path_factory.mktemp("cuda-gnupg") / "gnupg"
    key = generate_key(home, name="gpu-airgap test CUDA repository (throwaway)")
    yield key
    stop_agent(home)


@pytest.fixture(scope="module")
def cuda_site(
    upstream_tree: UpstreamTree, cuda_key: SigningKey, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    site = tmp_path_factory.mktemp("cuda-site")
    build_cuda_repo(upstream_tree, site, cuda_key)
    build_cuda_yum_repo(upstream_tree, site, cuda_key)
    return site


@pytest.fixture(scope="module")
def cuda_server(cuda_site: Path) -> Iterator[UpstreamServer]:
    with UpstreamServer(cuda_site) as server:
        yield server


def _key_file(key: SigningKey, tmp_path: Path) -> Path:
    path = tmp_path / "cuda.asc"
    path.write_bytes(key.public_key_armored())
    return path


def test_a_sync_from_a_cuda_repository_takes_only_the_toolkit_chain_and_builds(
    cuda_server: UpstreamServer, cuda_key: SigningKey, operator_key: TestKey, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    upstream = f"cuda:{cuda_server.url}/{REPO}"
    result = run_mirror_sync(dest, upstream, _key_file(cuda_key, tmp_path), "--json")
    assert result.exit_code == 0, result.stderr
    assert "is none of NVIDIA's CUDA keys" in result.stderr  # a test key, not 3bf863cc
    state = MirrorState.load(dest)
    repo = state.repo("stable/deb/amd64")
    assert repo is not None and state.upstream == upstream
    assert repo.base_url == f"{cuda_server.url}/{REPO}"
    assert [r.toolkit_version for r in repo.releases] == ["1.17.8-1"]
    assert sorted(p.name for p in repo.packages) == sorted(
        [
            "libnvidia-container1",
            "libnvidia-container-tools",
            "nvidia-container-toolkit-base",
            "nvidia-container-toolkit",
        ]
    )
    fetched = {r.path.rsplit("/", 1)[-1] for r in cuda_server.log}
    assert "Packages.gz" in fetched and "Packages" not in fetched  # the compressed index, as apt takes it
    assert (dest / "stable/deb/amd64/Packages.gz").is_file()
    assert not any(name.startswith(("cuda-", "libcublas", "nvidia-driver")) for name in fetched)
    assert repo.provenance.fingerprint == cuda_key.fingerprint
    assert json.loads(result.stdout)["ok"]
    built = run_bundle_build(dest, operator_key, tmp_path / "b.tar.zst")
    assert built.exit_code == 0, built.stderr
    published = publish(dest, tmp_path / "site", "http://mirror.internal/nvct", key=operator_key)
    assert published.exit_code == 0, published.stderr
    served = (tmp_path / "site/stable/deb/amd64/Packages").read_text()
    assert served.count("Package: ") == 4 and "cuda-" not in served
    status = run_cli("mirror", "status", "--mirror", str(dest))  # upstream checked with the recorded CUDA key
    assert status.exit_code == 0, status.stderr
    assert "stable/deb/amd64: 1.17.8-1" in status.stdout and "newer upstream: 1.20.1-1" in status.stdout


def test_a_cuda_repository_without_a_key_is_refused_naming_the_cuda_key(tmp_path: Path) -> None:
    result = run_cli(
        "mirror",
        "sync",
        "--dest",
        str(tmp_path / "m"),
        "--upstream",
        "cuda:ubuntu2204/x86_64",
        "--format",
        "deb",
        "--arch",
        "amd64",
    )
    assert result.exit_code == 2
    assert "is signed with NVIDIA's CUDA key, not the toolkit's: pass it with --keyring" in result.stderr
    assert not (tmp_path / "m").exists()


def test_a_cuda_repository_is_one_target(tmp_path: Path, cuda_key: SigningKey) -> None:
    result = run_mirror_sync(
        tmp_path / "m", "cuda:ubuntu2204/x86_64", _key_file(cuda_key, tmp_path), version=None, fmt="deb,rpm"
    )
    assert result.exit_code == 2
    assert "is one repository (one format and arch)" in result.stderr


def test_a_cuda_repository_signed_by_another_key_is_refused(
    cuda_server: UpstreamServer, upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    result = run_mirror_sync(tmp_path / "m", f"cuda:{cuda_server.url}/{REPO}", upstream_tree.public_key)
    assert result.exit_code == 3, result.stderr


def test_cuda_shorthand_names_nvidias_download_repository() -> None:
    assert cuda.base_url("cuda:ubuntu2204/sbsa") == (
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/sbsa"
    )
    assert cuda.base_url("cuda:http://proxy.internal/cuda/ubuntu2204/x86_64/") == (
        "http://proxy.internal/cuda/ubuntu2204/x86_64"
    )


def test_a_cuda_sized_packages_index_is_read_fast_for_the_toolkit_chain(cuda_site: Path) -> None:
    text = (cuda_site / REPO / "Packages").read_text()
    assert text.count("\nPackage: ") + 1 >= 3000
    started = time.perf_counter()
    found = list(iter_packages(text.splitlines(keepends=True), names=cuda.TOOLKIT_CHAIN))
    seconds = time.perf_counter() - started
    assert {p.name for p in found} <= cuda.TOOLKIT_CHAIN and len(found) >= 12
    assert seconds < 2.0, f"{seconds:.2f} s to read the toolkit chain out of a CUDA-sized index"


def test_plan_and_list_read_a_cuda_repository_for_the_toolkit_chain(
    cuda_server: UpstreamServer, cuda_key: SigningKey, tmp_path: Path
) -> None:
    upstream, key = f"cuda:{cuda_server.url}/{REPO}", str(_key_file(cuda_key, tmp_path))
    deb_amd64 = ("--upstream", upstream, "--keyring", key, "--format", "deb", "--arch", "amd64")
    planned = run_cli("mirror", "plan", *deb_amd64, "--version", "1.18.0", "--json")
    assert planned.exit_code == 0, planned.stderr
    assert "nvidia-container-toolkit_1.18.0-1_amd64.deb" in planned.stdout
    listed = run_cli("mirror", "list", *deb_amd64, "--channel", "stable", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert "1.20.1-1" in listed.stdout and "1.17.8-1" in listed.stdout


def test_a_sync_from_a_cuda_yum_repository_takes_the_toolkit_chain(
    cuda_server: UpstreamServer, cuda_key: SigningKey, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    result = run_mirror_sync(
        dest,
        f"cuda:{cuda_server.url}/compute/cuda/repos/rhel9/x86_64",
        _key_file(cuda_key, tmp_path),
        version="1.18.0",
        fmt="rpm",
        arch="x86_64",
    )
    assert result.exit_code == 0, result.stderr
    repo = MirrorState.load(dest).repo("stable/rpm/x86_64")
    assert repo is not None and [r.toolkit_version for r in repo.releases] == ["1.18.0-1"]
    assert repo.provenance.fingerprint == cuda_key.fingerprint
