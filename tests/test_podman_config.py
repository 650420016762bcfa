"""``configure podman`` without podman: which file it plans (CDI spec or hook), where, and what verify says."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Tuple

import pytest

from configure.changes import Journal, apply_changes
from configure.commands import verify
from configure.engine import RuntimeOptions
from configure.podman import PodmanEngine, hooks_dirs
from plumbing.errors import ProblemsFound, UsageError
from tests.cli_runner import run_cli


def _engine(version: Optional[Tuple[int, int]] = (4, 3)) -> PodmanEngine:
    return PodmanEngine(version=lambda root: version)


def _gpu(root: Path) -> Path:
    dev = root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    for name in ("nvidia0", "nvidiactl"):
        (dev / name).write_text("")  # a regular file is enough to be described (not opened)
    return root


def _spec(root: Path, path: str) -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n"
        "    deviceNodes:\n    - path: /dev/nvidia0\n"
    )
    return target


def test_cdi_writes_the_spec_to_etc_cdi_when_none_is_valid(tmp_path: Path) -> None:
    plan = _engine().plan(RuntimeOptions(root=_gpu(tmp_path), cdi=True))
    assert [c.path for c in plan.changes] == [tmp_path / "etc/cdi/nvidia.yaml"]
    assert plan.facts["MODE"] == "cdi" and plan.facts["DEVICES"] == "0,all"
    assert "--device nvidia.com/gpu=all" in plan.next_step


@pytest.mark.parametrize("existing", ["/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"])
def test_cdi_uses_a_valid_spec_where_podman_loads_it_and_writes_nothing(tmp_path: Path, existing: str) -> None:
    _spec(_gpu(tmp_path), existing)
    plan = _engine().plan(RuntimeOptions(root=tmp_path, cdi=True))
    assert not plan.changed and plan.facts["CDI_SPEC"] == existing


def test_cdi_without_a_spec_or_a_gpu_is_one_sentence(tmp_path: Path) -> None:
    result = run_cli("configure", "podman", "--root", str(tmp_path))
    assert result.exit_code != 0 and "no GPU device nodes" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "etc").exists()


def test_podman_before_4_1_gets_the_hook_with_a_warning(tmp_path: Path) -> None:
    plan = _engine((3, 4)).plan(RuntimeOptions(root=_gpu(tmp_path), cdi=True))
    assert plan.facts["MODE"] == "hook"
    assert plan.changes[0].path == tmp_path / "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"
    assert any("podman 3.4 has no CDI devices" in w for w in plan.warnings)


def test_install_without_cdi_uses_the_hook(tmp_path: Path) -> None:
    plan = _engine().plan(RuntimeOptions(root=tmp_path, cdi=False))
    assert plan.facts["MODE"] == "hook"


def test_the_hook_goes_to_the_strongest_hooks_dir_containers_conf_sets(tmp_path: Path) -> None:
    conf = tmp_path / "etc/containers/containers.conf.d/50-hooks.conf"
    conf.parent.mkdir(parents=True)
    (tmp_path / "etc/containers/containers.conf").write_text('[engine]\nhooks_dir = ["/x"]\n')
    conf.write_text('[engine]\nhooks_dir = ["/usr/share/containers/oci/hooks.d", "/opt/hooks.d"]\n')
    assert hooks_dirs(tmp_path) == ("/usr/share/containers/oci/hooks.d", "/opt/hooks.d")
    plan = _engine().plan(RuntimeOptions(root=tmp_path, hook=True, runtime_path="/opt/nv/nvidia-container-runtime"))
    hook = json.loads(plan.changes[0].new)
    assert plan.changes[0].path == tmp_path / "opt/hooks.d/oci-nvidia-hook.json"
    assert hook["hook"]["path"] == "/opt/nv/nvidia-container-runtime-hook" and hook["stages"] == ["prestart"]


def test_a_relative_hooks_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--hooks-dir must be an absolute directory"):
        _engine().plan(RuntimeOptions(root=tmp_path, hook=True, hooks_dir="hooks.d"))
    assert run_cli("configure", "podman", "--root", str(tmp_path), "--hooks-dir", "/x").exit_code == 2


def test_verify_names_a_missing_hook_binary_and_an_unread_hooks_dir(tmp_path: Path) -> None:
    plan = _engine().plan(RuntimeOptions(root=tmp_path, hook=True, hooks_dir="/etc/containers/oci/hooks.d"))
    apply_changes("podman", plan.changes, Journal(tmp_path), dict(plan.notes))
    with pytest.raises(ProblemsFound) as caught:
        verify(tmp_path, ["podman"])
    assert caught.value.problems == [
        f"podman: the hook binary /usr/bin/nvidia-container-runtime-hook does not exist under {tmp_path}",
        "podman: /etc/containers/oci/hooks.d is not a hooks directory podman reads",
    ]


def test_verify_cdi_fails_when_the_spec_names_a_device_that_is_gone(tmp_path: Path) -> None:
    plan = _engine().plan(RuntimeOptions(root=_gpu(tmp_path), cdi=True))
    apply_changes("podman", plan.changes, Journal(tmp_path), dict(plan.notes))
    assert "podman: CDI devices nvidia.com/gpu=... come from /etc/cdi/nvidia.yaml" in verify(tmp_path, ["podman"])
    os.unlink(tmp_path / "dev/nvidia0")
    with pytest.raises(ProblemsFound) as caught:
        verify(tmp_path, ["podman"])
    assert caught.value.problems[0] == "podman: no usable nvidia.com/gpu CDI spec in /etc/cdi or /var/run/cdi"
