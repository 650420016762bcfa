"""GPU Operator nodes: refused only where its toolkit owns the runtime; its driver container is the driver root.

Fixtures (``tests/data/fixtures/distros/gpu-operator*``, PROVENANCE.md): ``gpu-operator`` (toolkit enabled
and registered), ``gpu-operator-toolkit-disabled`` (``toolkit.enabled=false``: the runtimes removed, the
toolkit directory left behind) and ``gpu-operator-driver-container`` (the Operator's driver container
provides the driver, the toolkit is the host's).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.test_distros import BINARY, FIXTURES, configure, loads, needs_containerd, node, report, tree


def test_a_toolkit_directory_left_behind_with_nothing_registered_is_not_the_operators(tmp_path: Path) -> None:
    root = node(tmp_path, "gpu-operator-toolkit-disabled")
    assert (root / "usr/local/nvidia/toolkit/nvidia-container-runtime").is_file()
    done = configure(root)
    assert done.exit_code == 0, done.stderr
    assert "is left from the GPU Operator's toolkit, but no runtime is registered from it" in done.stderr
    assert report(root)["owner"] == ""


@needs_containerd
def test_the_toolkit_disabled_node_is_configured_and_containerd_loads_the_host_runtime(
    tmp_path: Path,
) -> None:
    root = node(tmp_path, "gpu-operator-toolkit-disabled")
    assert configure(root).exit_code == 0
    effective = loads(root, "/etc/containerd/config.toml", tmp_path)
    assert effective.error == "" and effective.runtime["BinaryName"] == BINARY


def test_the_operators_drop_in_is_its_registration_even_before_the_main_config_imports_it(
    tmp_path: Path,
) -> None:
    root = node(tmp_path, "gpu-operator-toolkit-disabled")
    (root / "etc/containerd/conf.d").mkdir()
    shutil.copy(
        FIXTURES / "gpu-operator/etc/containerd/config.toml", root / "etc/containerd/conf.d/99-nvidia.toml"
    )
    before = tree(root)
    done = configure(root)
    assert done.exit_code == 5 and "managed by the NVIDIA GPU Operator" in done.stderr
    assert (
        "/etc/containerd/conf.d/99-nvidia.toml registers runtime nvidia with /usr/local/nvidia/toolkit/"
        in done.stderr
    )
    assert tree(root) == before
