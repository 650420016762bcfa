"""Competing NVIDIA repositories on a node are named before an install (issue 26 item 5).

The node roots under ``tests/data/fixtures/node-repos`` hold real shapes of the source files
(PROVENANCE.md there): the CUDA network repository as ``cuda-keyring`` writes it, NVIDIA's
``cuda-rhel9.repo``, a DGX OS deb822 source, Ubuntu's own libnvidia-container in universe, the
retired nvidia-docker list, and a Debian node that offers nothing of the toolkit.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from configure import node_repos, package_origins
from installer.cli.node import _status_lines
from installer.install import install
from installer.manage import status
from installer.plan import InstallOptions
from installer.target import StagedTarget
from tests.node_fixtures import TOOLKIT, build_rpm, build_target, seed_containerd_node
from tests.pkg_clients import dnf_with_repo
from tests.test_node_install import _keys, _setup  # noqa: F401 (the autouse key fixture)
from tests.upstream import UpstreamServer

FIXTURES = Path(__file__).parent / "data/fixtures/node-repos"
CUDA_LIST = "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] https://example.invalid/x /\n"


def warnings_for(name: str, root: Path = FIXTURES) -> List[str]:
    node = root / name
    offers = node_repos.apt_offers(node, ["nvidia-container-toolkit", "libnvidia-container1"])
    sources = node_repos.node_sources(node)
    return [r.warning() for r in node_repos.competing(sources, offers, node_repos.apt_pinned_away(node))]


def test_the_cuda_keyring_list_is_named_with_its_file_url_and_the_apt_upgrade_risk() -> None:
    assert warnings_for("cuda-ubuntu2204") == [
        "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list names NVIDIA's CUDA repository "
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/; a later "
        "`apt-get upgrade` could replace the toolkit this bundle installs with its packages: install with "
        "--hold, or give nvidia-container-toolkit* libnvidia-container* Pin-Priority -1 from it in "
        "/etc/apt/preferences.d (docs/node.md)"
    ]


def test_nvidias_cuda_rhel9_repo_is_named_with_its_section_and_the_excludepkgs_that_stops_it() -> None:
    assert warnings_for("rhel9-cuda") == [
        "/etc/yum.repos.d/cuda-rhel9.repo [cuda-rhel9-x86_64] names NVIDIA's CUDA repository "
        "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64; a later `dnf upgrade` could "
        "replace the toolkit this bundle installs with its packages: install with --hold, or add "
        "excludepkgs=nvidia-container-toolkit* libnvidia-container* to that section (docs/node.md)"
    ]


#: what docs/node.md tells the admin to write to keep the CUDA repository but never take the toolkit from it
NO_TOOLKIT_FROM_CUDA = (
    "Package: nvidia-container-toolkit* libnvidia-container*\n"
    "Pin: origin developer.download.nvidia.com\nPin-Priority: -1\n"
)


@pytest.mark.parametrize(
    ("file", "text", "named"),
    [
        ("no-toolkit-from-cuda", NO_TOOLKIT_FROM_CUDA, False),
        (
            "no-toolkit-from-cuda.pref",
            NO_TOOLKIT_FROM_CUDA.replace(
                "origin developer.download.nvidia.com", 'origin "developer.download.nvidia.com"'
            ),
            False,
        ),
        ("no-toolkit-from-cuda.disabled", NO_TOOLKIT_FROM_CUDA, True),  # apt ignores that file name
        ("all-from-cuda", NO_TOOLKIT_FROM_CUDA.replace("-1", "600"), True),
        (
            "nsight-only",
            NO_TOOLKIT_FROM_CUDA.replace("nvidia-container-toolkit* libnvidia-container*", "nsight-*"),
            True,
        ),
    ],
)
def test_the_apt_pin_docs_advise_silences_the_warning_and_nothing_less_does(
    tmp_path: Path, file: str, text: str, named: bool
) -> None:
    shutil.copytree(FIXTURES / "cuda-ubuntu2204", tmp_path / "node")
    (tmp_path / "node/etc/apt/preferences.d" / file).write_text(text)
    assert bool(warnings_for("node", tmp_path)) is named


def test_a_dgx_deb822_source_is_named() -> None:
    (warning,) = warnings_for("dgx-noble")
    assert warning.startswith(
        "/etc/apt/sources.list.d/dgx.sources names a DGX OS repository "
        "https://repo.download.nvidia.com/baseos/ubuntu/noble/arm64/; a later `apt-get upgrade`"
    )


def test_every_enabled_line_of_the_retired_nvidia_docker_list_is_named_and_commented_ones_are_not() -> None:
    found = warnings_for("nvidia-docker-bionic")
    assert [w.split(" names ")[1].split(";")[0] for w in found] == [
        "NVIDIA's public toolkit repository https://nvidia.github.io/libnvidia-container/stable/ubuntu18.04/$(ARCH)",
        "the retired nvidia-container-runtime repository "
        "https://nvidia.github.io/nvidia-container-runtime/stable/ubuntu18.04/$(ARCH)",
        "the retired nvidia-docker repository https://nvidia.github.io/nvidia-docker/ubuntu18.04/$(ARCH)",
    ]


def test_a_distribution_repo_is_named_only_when_its_apt_lists_offer_the_toolkit() -> None:
    assert warnings_for("debian-trixie") == []
    (warning,) = warnings_for("ubuntu-noble-universe")
    assert warning.startswith(
        "/etc/apt/sources.list.d/ubuntu.sources names a repository http://archive.ubuntu.com/ubuntu/ "
        "(it offers libnvidia-container1 1.19.1-0ubuntu1); a later `apt-get upgrade`"
    )


@pytest.mark.parametrize(
    "extra",
    [
        "enabled=0\n",
        "excludepkgs=nvidia-container-toolkit* libnvidia-container*\n",
        "exclude=nvidia-*,libnvidia-container*\n",
        "includepkgs=cuda-toolkit-12-*\n",
    ],
    ids=["disabled", "excludepkgs", "exclude", "includepkgs"],
)
def test_a_yum_section_that_cannot_offer_the_toolkit_is_not_named(tmp_path: Path, extra: str) -> None:
    text = (FIXTURES / "rhel9-cuda/etc/yum.repos.d/cuda-rhel9.repo").read_text().replace("enabled=1\n", "")
    (tmp_path / "etc/yum.repos.d").mkdir(parents=True)
    (tmp_path / "etc/yum.repos.d/cuda-rhel9.repo").write_text(text + extra)
    assert node_repos.competing(node_repos.node_sources(tmp_path), {}) == []


def test_deb822_enabled_no_and_deb_src_lines_are_not_sources() -> None:
    assert (
        node_repos.parse_deb822(
            "Types: deb-src\nURIs: https://developer.download.nvidia.com/compute/cuda/repos/x/\n", "f"
        )
        == []
    )
    assert (
        node_repos.parse_deb822(
            "Enabled: no\nTypes: deb\nURIs: https://developer.download.nvidia.com/compute/cuda/repos/x/\n",
            "f",
        )
        == []
    )
    assert (
        node_repos.parse_one_line(
            "deb-src https://developer.download.nvidia.com/compute/cuda/repos/x/ /\n", "f"
        )
        == []
    )
    assert [s.url for s in node_repos.parse_one_line(CUDA_LIST, "f")] == ["https://example.invalid/x"]


def test_apt_list_file_names_decode_to_their_urls() -> None:
    assert (
        node_repos.list_url("developer.download.nvidia.com_compute_cuda_repos_ubuntu2204_x86%5f64_Packages")
        == "developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
    )


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, StagedTarget]:
    return {"deb": build_target(tmp_path_factory.mktemp("repos-release"), "deb", "1.17.8-1", "amd64")}


def test_install_warns_about_the_cuda_repository_and_still_installs(
    tmp_path: Path, release: Dict[str, StagedTarget]
) -> None:
    root = seed_containerd_node(tmp_path / "root")
    shutil.copytree(FIXTURES / "cuda-ubuntu2204", root, dirs_exist_ok=True)
    bundle, key, env, _ = _setup(tmp_path, release["deb"])
    planned = install(bundle, key, InstallOptions(root=root, dry_run=True), env)
    assert any(
        m.startswith("/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list names NVIDIA's CUDA repository")
        for m in planned.messages
    ), planned.messages
    done = install(bundle, key, InstallOptions(root=root), env)
    assert done.outcome == "installed" and any("`apt-get upgrade` could replace" in m for m in done.messages)
    # with the hold the install sets, the warning says what protects the toolkit instead of advising it
    again = install(bundle, key, InstallOptions(root=root, hold=True, dry_run=True), env)
    assert any(
        m.endswith(
            "the hold on the toolkit keeps a later `apt-get upgrade` from replacing it with its packages"
        )
        for m in again.messages
    ), again.messages


def test_status_says_the_bundle_for_what_gpu_airgap_installed_and_an_apt_list_for_the_rest(
    tmp_path: Path, release: Dict[str, StagedTarget]
) -> None:
    root = seed_containerd_node(tmp_path / "root")
    shutil.copytree(FIXTURES / "ubuntu-noble-universe", root, dirs_exist_ok=True)
    bundle, key, env, _ = _setup(tmp_path, release["deb"])
    install(bundle, key, InstallOptions(root=root), env)
    report = status(root, env)
    assert report["origins"] == dict.fromkeys(TOOLKIT, "a gpu-airgap bundle")
    assert "  nvidia-container-toolkit: 1.17.8-1 (from a gpu-airgap bundle)" in _status_lines(report)
    # a version gpu-airgap did not install, which Ubuntu's universe list offers (dpkg records no source)
    installed = {"libnvidia-container1": "1.19.1-0ubuntu1", "nvidia-container-toolkit": "1.17.8-1"}
    assert package_origins.package_origins(root, installed, "deb", {}) == {
        "libnvidia-container1": "apt lists: archive.ubuntu.com/ubuntu",
        "nvidia-container-toolkit": None,  # no list offers it and gpu-airgap has no record of it
    }


def test_status_names_the_repository_dnfs_history_records_for_an_rpm(tmp_path: Path) -> None:
    web = tmp_path / "web/cuda"
    web.mkdir(parents=True)
    rpm = build_rpm(tmp_path / "build", "nvidia-container-toolkit", "1.99.0-1", files=False)
    shutil.copy(rpm, web / rpm.name)
    subprocess.run(["createrepo_c", "-q", str(web)], check=True)
    with UpstreamServer(tmp_path / "web") as server:
        repo = (FIXTURES / "rhel9-cuda/etc/yum.repos.d/cuda-rhel9.repo").read_text()
        repo = repo.replace(
            "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64", f"{server.url}/cuda"
        )
        repo = repo.replace("gpgcheck=1", "gpgcheck=0")
        done = dnf_with_repo(tmp_path / "dnf", repo, "install", "nvidia-container-toolkit")
    assert done.returncode == 0, done.stderr
    root = tmp_path / "dnf/root"
    (root / "etc/yum.repos.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/yum.repos.d/cuda-rhel9.repo").write_text(repo)
    assert (
        package_origins.dnf_history_repo(root, "nvidia-container-toolkit", "1.99.0-1") == "cuda-rhel9-x86_64"
    )
    assert package_origins.dnf_history_repo(root, "nvidia-container-toolkit", "1.98.0-1") is None
    assert package_origins.package_origins(root, {"nvidia-container-toolkit": "1.99.0-1"}, "rpm", {}) == {
        "nvidia-container-toolkit": f"cuda-rhel9-x86_64 ({server.url}/cuda)"
    }
    # what gpu-airgap recorded installing is the bundle's, whatever dnf saw
    ours = {"nvidia-container-toolkit": "1.99.0-1"}
    assert package_origins.package_origins(root, ours, "rpm", ours) == {
        "nvidia-container-toolkit": "a gpu-airgap bundle"
    }


def test_only_the_named_packages_stanzas_count_not_their_namesakes_with_a_suffix() -> None:
    text = (
        "Package: libnvidia-container1-dbg\nVersion: 9.9.9-1\n\n"
        "Package: libnvidia-container1\nArchitecture: amd64\nVersion: 1.19.1-0ubuntu1\n\n"
        "Package: nvidia-container-toolkit\nVersion: 1.17.8-1"  # the last stanza, no blank line after it
    )
    assert node_repos.packages_offered(text, ["libnvidia-container1", "nvidia-container-toolkit"]) == [
        ("libnvidia-container1", "1.19.1-0ubuntu1"),
        ("nvidia-container-toolkit", "1.17.8-1"),
    ]


@pytest.mark.parametrize(
    ("url", "what"),
    [
        (
            "https://developer.download.nvidia.cn/compute/cuda/repos/ubuntu2404/sbsa/",
            "NVIDIA's CUDA repository",
        ),
        ("http://repo.download.nvidia.com/baseos/ubuntu/jammy/x86_64/", "a DGX OS repository"),
        (
            "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)",
            "NVIDIA's public toolkit repository",
        ),
        ("https://download.docker.com/linux/ubuntu", None),
        (
            "https://developer.download.nvidia.com/hpc-sdk/ubuntu/arm64",
            None,
        ),  # NVIDIA's, but no toolkit there
    ],
)
def test_nvidia_repositories_are_told_apart_by_url(url: str, what: Optional[str]) -> None:
    assert node_repos.nvidia_repo(url) == what


def test_only_the_package_manager_of_the_bundles_target_is_asked(tmp_path: Path) -> None:
    # a Debian host with dnf installed may carry /etc/yum.repos.d; its apt never reads it
    shutil.copytree(FIXTURES / "rhel9-cuda", tmp_path, dirs_exist_ok=True)
    shutil.copytree(FIXTURES / "cuda-ubuntu2204", tmp_path, dirs_exist_ok=True)
    names = ["nvidia-container-toolkit"]
    deb = node_repos.competing_notes(tmp_path, "deb", names, held=False)
    rpm = node_repos.competing_notes(tmp_path, "rpm", names, held=False)
    assert [n.split(" names ")[0] for n in deb] == ["/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list"]
    assert [n.split(" names ")[0] for n in rpm] == ["/etc/yum.repos.d/cuda-rhel9.repo [cuda-rhel9-x86_64]"]
