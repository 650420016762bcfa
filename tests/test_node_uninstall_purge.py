"""``uninstall --purge`` refusals that need no packages (the real-package flows: tests/test_real_packages_purge.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence

from installer.purge import GENERATED, plan_leftovers, remove
from plumbing.errors import ExitCode
from plumbing.fsutil import rooted
from tests.cli_runner import run_cli
from tests.fakes import FakeBackend
from tests.node_fixtures import seed_containerd_node


def test_purge_with_keep_packages_is_refused_as_a_contradiction(tmp_path: Path) -> None:
    root = seed_containerd_node(tmp_path / "root")
    both = run_cli("uninstall", "--root", str(root), "--purge", "--keep-packages")
    assert both.exit_code == ExitCode.USAGE
    assert "--purge and --keep-packages contradict each other" in both.stderr


def test_purge_with_no_record_and_nothing_left_says_there_is_nothing_to_uninstall(tmp_path: Path) -> None:
    root = seed_containerd_node(tmp_path / "root")
    nothing = run_cli("uninstall", "--root", str(root), "--purge")
    assert nothing.exit_code == ExitCode.ERROR
    assert "nothing to uninstall: gpu-airgap has no install recorded" in nothing.stderr


class _RemovedWithConfigs(FakeBackend):
    """dpkg as seen after ``dpkg --remove`` of some packages: each keeps its config files."""

    def __init__(self, installed: Dict[str, str], removed: Dict[str, str], configs: Dict[str, str]) -> None:
        super().__init__(installed=installed)
        self.removed = removed
        self.configs = configs

    def package_state(self, name: str) -> str:
        if name in self.removed:
            return f"{self.removed[name]} (removed, config files remain)"
        return super().package_state(name)

    def config_files(self, names: Sequence[str]) -> List[str]:
        return [self.configs[n] for n in names if n in self.configs]


def test_purging_leftovers_without_a_record_keeps_what_an_installed_package_still_uses(
    tmp_path: Path,
) -> None:
    backend = _RemovedWithConfigs(
        installed={"nvidia-container-toolkit-base": "1.17.8-1"},  # installed by someone else: not ours
        removed={"nvidia-container-toolkit": "1.17.8-1"},
        configs={
            "nvidia-container-toolkit-base": "/etc/base.env",
            "nvidia-container-toolkit": "/etc/toolkit.conf",
        },
    )
    for path in ("/etc/base.env", "/etc/toolkit.conf", *GENERATED):
        rooted(tmp_path, path).parent.mkdir(parents=True, exist_ok=True)
        rooted(tmp_path, path).write_text("config\n")
    removal = plan_leftovers(backend, tmp_path, ["nvidia-container-toolkit", "nvidia-container-toolkit-base"])
    said = remove(backend, removal)
    assert backend.calls == [("purge", "nvidia-container-toolkit")]
    assert said == [
        "purged nvidia-container-toolkit: no config files remain",
        "deleted /etc/toolkit.conf (left by the packages' scripts or rpm)",
    ]
    assert rooted(tmp_path, "/etc/base.env").is_file() and rooted(tmp_path, GENERATED[0]).is_file()
