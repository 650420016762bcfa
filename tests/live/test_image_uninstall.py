"""Issue 24 item 1: a node booted from an image built with ``install --root`` uninstalls cleanly.

The image is the booted node's root (:mod:`tests.live.booted`) with the toolkit installed into it
from this host with ``--root`` before it ever boots; then it boots, and the admin runs the node tool
from the bundle inside it. The records name node paths, so the node finds its own files: no drift,
and ``uninstall`` restores containerd's config and removes the packages, with containerd running
again without the runtime.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from installer.nodecheck import NODE_TOOL
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.live import booted

pytestmark = pytest.mark.slow

CONFIG = "/etc/containerd/config.toml"
TOOLKIT = "nvidia-container-toolkit"


def test_a_node_booted_from_an_image_built_with_root_finds_its_records_and_uninstalls_cleanly(
    booted_tarball: Path, deb_bundle: Path, operator_key: TestKey, tmp_path: Path, cri: None
) -> None:
    original: dict[str, bytes] = {}

    def build_image(root: Path) -> None:
        original["config"] = (root / CONFIG.lstrip("/")).read_bytes()
        built = run_cli(
            "install",
            str(deb_bundle),
            "--keyring",
            str(operator_key.public),
            "--root",
            str(root),
            "--runtime",
            "containerd",
            "--cdi",
            "off",
        )
        assert built.exit_code == 0, built.stderr
        assert str(root) not in (root / "var/lib/gpu-airgap/state.json").read_text()

    with booted.BootedNode(tmp_path / "node", booted_tarball, prepare=build_image) as node:
        booted.hand_over(node, deb_bundle, operator_key.public)
        assert "nvidia" in booted.runtime_handlers(node, tmp_path / "cri-logs")

        def tool(*args: str) -> subprocess.CompletedProcess[str]:
            return node.run("python3", f"{booted.NODE_DIR}/{NODE_TOOL}", *args, check=False)

        shown = tool("status", "--json")
        assert shown.returncode == 0, (
            shown.stdout + shown.stderr
        )  # no drift: the recorded files are the node's
        removed = tool("uninstall", "--json")
        assert removed.returncode == 0, removed.stderr
        result = json.loads(removed.stdout)
        assert result["restored"] == [CONFIG] and TOOLKIT in result["removed"]
        assert node.path(CONFIG).read_bytes() == original["config"]
        assert not node.path("/var/lib/gpu-airgap/state.json").exists()
        left = node.run("dpkg-query", "-W", "-f=${db:Status-Abbrev}", TOOLKIT, check=False).stdout
        assert not left.startswith("ii"), left
        assert node.active_state("containerd") == "active"
        assert "nvidia" not in booted.runtime_handlers(node, tmp_path / "cri-logs")
