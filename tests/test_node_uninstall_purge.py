"""``uninstall --purge`` refusals that need no packages (the real-package flows: tests/test_real_packages_purge.py)."""

from __future__ import annotations

from pathlib import Path

from plumbing.errors import ExitCode
from tests.cli_runner import run_cli
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
