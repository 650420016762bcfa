"""``configure podman`` without podman: which file it plans (CDI spec or hook), where, and what verify says."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Tuple

import pytest

from configure.commands import verify
from configure.engine import RuntimeOptions
from configure.journal import Journal, apply_changes
from configure.podman.engine import PodmanEngine, hooks_dirs
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
def test_cdi_uses_a_valid_spec_where_podman_loads_it_and_writes_nothing(
    tmp_path: Path, existing: str
) -> None:
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
    plan = _engine().plan(
        RuntimeOptions(root=tmp_path, hook=True, runtime_path="/opt/nv/nvidia-container-runtime")
    )
    hook = json.loads(plan.changes[0].new)
    assert plan.changes[0].path == tmp_path / "opt/hooks.d/oci-nvidia-hook.json"
    assert hook["hook"]["path"] == "/opt/nv/nvidia-container-runtime-hook" and hook["stages"] == ["prestart"]


def test_a_relative_hooks_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--hooks-dir must be an absolute directory"):
        _engine().plan(RuntimeOptions(root=tmp_path, hook=True, hooks_dir="hooks.d"))
    assert run_cli("configure", "podman", "--root", str(tmp_path), "--hooks-dir", "/x").exit_code == 2


def test_verify_names_a_missing_hook_binary_an_unread_hooks_dir_and_a_missing_cli(tmp_path: Path) -> None:
    plan = _engine().plan(RuntimeOptions(root=tmp_path, hook=True, hooks_dir="/etc/containers/oci/hooks.d"))
    apply_changes("podman", plan.changes, Journal(tmp_path), dict(plan.notes))
    with pytest.raises(ProblemsFound) as caught:
        verify(tmp_path, ["podman"])
    assert caught.value.problems == [
        f"podman: the hook binary /usr/bin/nvidia-container-runtime-hook does not exist under {tmp_path}",
        "podman: /etc/containers/oci/hooks.d is not a hooks directory podman reads",
        "podman: nvidia-container-cli, which the hook runs, is not in /usr/local/sbin, /usr/local/bin, /usr/sbin, "
        f"/usr/bin, /sbin, /bin under {tmp_path}",
    ]


def test_verify_cdi_fails_when_the_spec_names_a_device_that_is_gone(tmp_path: Path) -> None:
    plan = _engine().plan(RuntimeOptions(root=_gpu(tmp_path), cdi=True))
    apply_changes("podman", plan.changes, Journal(tmp_path), dict(plan.notes))
    assert "podman: CDI devices nvidia.com/gpu=... come from /etc/cdi/nvidia.yaml" in verify(
        tmp_path, ["podman"]
    )
    os.unlink(tmp_path / "dev/nvidia0")
    with pytest.raises(ProblemsFound) as caught:
        verify(tmp_path, ["podman"])
    assert caught.value.problems[0] == "podman: no usable nvidia.com/gpu CDI spec in /etc/cdi or /var/run/cdi"


def _account(root: Path, name: str = "ana") -> Path:
    """An account whose ids are this process's own (chown to them works without root), with a home."""
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/passwd").write_text(
        f"root:x:0:0::/root:/bin/sh\n{name}:x:{os.getuid()}:{os.getgid()}::/home/{name}:/bin/sh\n"
    )
    home = root / "home" / name
    home.mkdir(parents=True)
    return home


def test_rootless_hook_goes_to_the_users_config_with_no_cgroups_and_revert_leaves_the_home_as_it_was(
    tmp_path: Path,
) -> None:
    home = _account(tmp_path)
    conf = home / ".config/containers/containers.conf"
    result = run_cli("configure", "podman", "--hook", "--user", "ana", "--root", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert (
        'hooks_dir = ["/usr/share/containers/oci/hooks.d", "/home/ana/.config/containers/oci/hooks.d"]'
        in conf.read_text()
    )
    assert "no-cgroups = true" in (home / ".config/nvidia-container-runtime/config.toml").read_text()
    hook = json.loads((home / ".config/containers/oci/hooks.d/oci-nvidia-hook.json").read_text())
    assert hook["hook"]["args"] == [
        "nvidia-container-runtime-hook",
        "-config=/home/ana/.config/nvidia-container-runtime/config.toml",
        "prestart",
    ]
    assert all(p.stat().st_uid == os.getuid() for p in [home / ".config", *(home / ".config").rglob("*")])
    assert (
        "already configured"
        in run_cli("configure", "podman", "--hook", "--user", "ana", "--root", str(tmp_path)).stdout
    )
    assert run_cli("configure", "revert", "--root", str(tmp_path)).exit_code == 0
    assert list(home.iterdir()) == []


def test_rootless_hook_refuses_to_write_as_root_through_a_link_the_user_planted(tmp_path: Path) -> None:
    home = _account(tmp_path)
    (tmp_path / "etc/containers").mkdir(parents=True)
    (home / ".config").symlink_to(
        "/etc"
    )  # the user's ~/.config/containers would be the system's /etc/containers
    result = run_cli("configure", "podman", "--hook", "--user", "ana", "--root", str(tmp_path))
    assert result.exit_code == 5, result.stderr
    assert result.stderr.strip() == (
        "gpu-airgap: error: /home/ana/.config: a symbolic link in ana's home; refusing to write through it as root"
    )
    assert list((tmp_path / "etc/containers").iterdir()) == []


def test_a_linked_containers_conf_drop_in_is_read_under_the_root(tmp_path: Path) -> None:
    # The link's absolute target is a node path: it must be followed under --root, not on this machine.
    (tmp_path / "usr/share/site").mkdir(parents=True)
    (tmp_path / "usr/share/site/hooks.conf").write_text('[engine]\nhooks_dir = ["/opt/hooks.d"]\n')
    (tmp_path / "etc/containers/containers.conf.d").mkdir(parents=True)
    (tmp_path / "etc/containers/containers.conf.d/50-hooks.conf").symlink_to("/usr/share/site/hooks.conf")
    assert hooks_dirs(tmp_path) == ("/opt/hooks.d",)


def test_rootless_hook_keeps_the_users_own_containers_conf_and_hooks_dirs(tmp_path: Path) -> None:
    home = _account(tmp_path)
    conf = home / ".config/containers/containers.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text('# mine\n[containers]\nlog_size_max = 10\n\n[engine]\nhooks_dir = ["/opt/hooks"]\n')
    plan = _engine().plan(RuntimeOptions(root=tmp_path, hook=True, user="ana"))
    new = plan.changes[0].new.decode()
    assert new.startswith("# mine\n[containers]\nlog_size_max = 10\n")
    assert 'hooks_dir = ["/opt/hooks", "/home/ana/.config/containers/oci/hooks.d"]' in new


def test_rootless_cdi_needs_device_nodes_the_user_can_open_and_the_spec_dir_in_its_cdi_spec_dirs(
    tmp_path: Path,
) -> None:
    home = _account(tmp_path, "bob")
    _gpu(tmp_path)
    if os.geteuid() == 0:
        os.chown(tmp_path / "dev/nvidia0", os.getuid() + 1, os.getgid() + 1)
    (tmp_path / "dev/nvidia0").chmod(0o660)
    (tmp_path / "dev/nvidiactl").chmod(0o666)
    plan = _engine().plan(RuntimeOptions(root=tmp_path, cdi=True, user="bob"))
    apply_changes("podman", plan.changes, Journal(tmp_path), dict(plan.notes))
    if os.geteuid() == 0:  # only root can give the node to someone else
        with pytest.raises(ProblemsFound) as caught:
            verify(tmp_path, ["podman"])
        assert caught.value.problems == ["podman: /dev/nvidia0 (mode 660) cannot be opened by bob"]
        # a supplementary group (video) that owns the node is enough, as for the kernel
        (tmp_path / "etc/group").write_text(f"video:x:{os.getgid() + 1}:alice,bob\n")
        assert "podman: bob can use them" in verify(tmp_path, ["podman"])
        (tmp_path / "etc/group").write_text(f"video:x:{os.getgid() + 1}:alice\n")
        with pytest.raises(ProblemsFound):
            verify(tmp_path, ["podman"])
    (tmp_path / "dev/nvidia0").chmod(0o666)
    assert "podman: bob can use them" in verify(tmp_path, ["podman"])
    conf = home / ".config/containers/containers.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text('[engine]\ncdi_spec_dirs = ["/srv/cdi"]\n')
    with pytest.raises(ProblemsFound) as caught:
        verify(tmp_path, ["podman"])
    assert caught.value.problems == [
        "podman: /home/bob/.config/containers/containers.conf sets cdi_spec_dirs without /etc/cdi"
    ]
