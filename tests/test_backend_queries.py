"""dpkg is asked once for every package install's preflight needs, and never answers from a stale record."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

import pytest

import plumbing.proc as proc
from installer.backends.dpkg import DpkgBackend
from installer.target import Requirement
from tests.node_fixtures import build_deb, seed_dpkg_root


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> List[List[str]]:
    seen: List[List[str]] = []
    real = proc.run

    def recording(argv: Any, **kwargs: Any) -> Any:
        seen.append([Path(str(argv[0])).name, *map(str, argv[1:])])
        return real(argv, **kwargs)

    monkeypatch.setattr(proc, "run", recording)
    return seen


def test_one_dpkg_query_and_no_other_process_answers_versions_requirements_and_traces(
    tmp_path: Path, calls: List[List[str]]
) -> None:
    seed_dpkg_root(tmp_path)
    backend = DpkgBackend(tmp_path)
    names = ["libc6", "libcap2", "nvidia-container-toolkit", "nvidia-docker2"]
    assert backend.installed_versions(names) == {
        "libc6": "2.36-9",
        "libcap2": "1:2.66-4",
        "nvidia-container-toolkit": None,
        "nvidia-docker2": None,
    }
    assert backend.provides(Requirement.parse("libc6 (>= 2.14)"))
    assert not backend.provides(Requirement.parse("libc6 (>= 2.99)"))
    assert backend.without_trace(["nvidia-container-toolkit", "nvidia-docker2"]) == [
        "nvidia-container-toolkit",
        "nvidia-docker2",
    ]
    assert [c[0] for c in calls].count("dpkg-query") == 1
    assert [c[0] for c in calls] == ["dpkg-query"]  # version comparisons run in process (dpkg's algorithm)


def test_an_install_forgets_what_dpkg_said_before(tmp_path: Path, calls: List[List[str]]) -> None:
    root, packages = tmp_path / "root", tmp_path / "debs"
    seed_dpkg_root(root)
    packages.mkdir()
    deb = build_deb(packages, "nvidia-container-toolkit-base", "1.20.0-1")
    backend = DpkgBackend(root)
    assert backend.installed_versions(["nvidia-container-toolkit-base"]) == {
        "nvidia-container-toolkit-base": None
    }
    backend.install([deb])
    assert backend.installed_version("nvidia-container-toolkit-base") == "1.20.0-1"
    backend.remove(["nvidia-container-toolkit-base"])
    assert backend.package_state("nvidia-container-toolkit-base") == "not installed"
