"""Shared set-up for the containerd tests: a node root with a config, and an engine with fixed probes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional, Tuple

from configure.containerd.engine import ContainerdEngine

FIXTURES = Path(__file__).parent / "data" / "fixtures" / "containerd"
CONFIG = "etc/containerd/config.toml"
DROP_IN = "etc/containerd/conf.d/99-nvidia.toml"


def make_root(root: Path, fixture: Optional[str] = None, text: Optional[str] = None) -> Path:
    """Put a fixture (or ``text``) at ROOT/etc/containerd/config.toml and return its path."""
    target = root / CONFIG
    target.parent.mkdir(parents=True, exist_ok=True)
    if fixture is not None:
        shutil.copy(FIXTURES / fixture, target)
        target.chmod(0o644)
    elif text is not None:
        target.write_text(text)
    return target


def engine(version: Optional[Tuple[int, int]] = (1, 6), kubelet: Optional[str] = None) -> ContainerdEngine:
    """A containerd engine that believes ``version`` is installed and the kubelet uses ``kubelet``."""
    return ContainerdEngine(version_probe=lambda _root: version, kubelet_probe=lambda _root: kubelet)
