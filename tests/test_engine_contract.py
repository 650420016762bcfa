"""One contract suite over every engine: containerd (1.x config in place, 2.x with its drop-in), docker, crio.

plan() never writes; applying twice writes once; report() reads back what was written; revert
restores every file byte for byte, including removing the ones that did not exist.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from configure.crio import CRIO_CONF, CrioEngine
from configure.docker import DAEMON_JSON, DockerEngine
from configure.engine import Engine, RuntimeOptions
from configure.journal import Journal, apply_changes
from configure.revert import revert
from plumbing.fsutil import rooted
from tests.containerd_helpers import engine as containerd_engine
from tests.containerd_helpers import make_root

FIXTURES = Path(__file__).parent / "data/fixtures"


def _docker_node(root: Path) -> None:
    rooted(root, DAEMON_JSON).parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "docker/daemon.json", rooted(root, DAEMON_JSON))


def _crio_node(root: Path) -> None:
    rooted(root, CRIO_CONF).parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "crio/crio.conf", rooted(root, CRIO_CONF))


def _containerd_node(root: Path) -> None:
    make_root(root, "config.toml.base")


def _containerd2_node(root: Path) -> None:
    make_root(root, "config-v3-containerd2-docs.toml")


#: contract case -> the engine (containerd with fixed version probes: the node's binary is not asked)
ENGINES: Dict[str, Callable[[], Engine]] = {
    "containerd": lambda: containerd_engine((1, 6)),
    "containerd-2": lambda: containerd_engine((2, 1), kubelet="systemd"),
    "docker": DockerEngine,
    "crio": CrioEngine,
}
NODES: Dict[str, Callable[[Path], None]] = {
    "containerd": _containerd_node,
    "containerd-2": _containerd2_node,
    "docker": _docker_node,
    "crio": _crio_node,
}


def _snapshot(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(params=sorted(ENGINES))
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("set_as_default", [False, True], ids=["keep-default", "set-as-default"])
def test_engine_contract(tmp_path: Path, engine_name: str, set_as_default: bool) -> None:
    engine = ENGINES[engine_name]()
    NODES[engine_name](tmp_path)
    before = _snapshot(tmp_path)
    options = RuntimeOptions(root=tmp_path, set_as_default=set_as_default)

    plan = engine.plan(options)
    assert plan.engine == engine.name == engine_name.split("-")[0]
    assert plan.changed and _snapshot(tmp_path) == before  # planning never writes

    written: List[Path] = apply_changes(engine.name, plan.changes, Journal(tmp_path), dict(plan.notes))
    assert written
    assert not engine.plan(options).changed  # already configured

    facts = engine.report(tmp_path, "nvidia")
    assert facts["RUNTIME"] == "nvidia"
    assert facts["RUNTIME_PATH"] == "/usr/bin/nvidia-container-runtime"
    assert {k: v for k, v in plan.facts.items() if k in facts} == {
        k: facts[k] for k in plan.facts if k in facts
    }
    assert (facts.get("DEFAULT") == "nvidia") is set_as_default
    assert "previous_default" in plan.notes

    revert(engine.name, Journal(tmp_path))
    after = _snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("var/lib/gpu-airgap")} == before
