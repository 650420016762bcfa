"""``configure lxc`` and ``configure lxd|incus`` without LXC: the lines, the refusals, the revert, the profile commands."""

from __future__ import annotations

from pathlib import Path
from typing import List, Sequence, Tuple

import pytest

from configure import lineedits
from configure.engine import RuntimeOptions
from configure.journal import Journal, apply_changes
from configure.lxc import lxd
from configure.lxc.engine import LxcEngine
from configure.revert import plan_revert, revert
from plumbing.errors import ConfigFormatError, ToolError, UsageError
from tests.cli_runner import run_cli

IDMAP = "lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\n"
OURS = [
    "lxc.environment = NVIDIA_VISIBLE_DEVICES=all",
    "lxc.environment = NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    "lxc.hook.mount = /usr/share/lxc/hooks/nvidia",
]


def _container(root: Path, text: str, name: str = "c1", lxcpath: str = "var/lib/lxc") -> Path:
    config = root / lxcpath / name / "config"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    return config


def test_appends_the_hook_and_environment_lines_once(tmp_path: Path) -> None:
    config = _container(tmp_path, "lxc.uts.name = c1\n" + IDMAP)
    plan = LxcEngine().plan(RuntimeOptions(root=tmp_path, container="c1"))
    assert plan.changes[0].new.decode().splitlines()[-3:] == OURS
    assert plan.notes["owned_lines"] == OURS and plan.facts["HOOK"] == "/usr/share/lxc/hooks/nvidia"
    apply_changes("lxc", plan.changes, Journal(tmp_path), dict(plan.notes))
    assert not LxcEngine().plan(RuntimeOptions(root=tmp_path, container="c1")).changed
    assert config.read_text().count("lxc.hook.mount") == 1


def test_a_variable_the_container_sets_keeps_its_value_with_a_warning(tmp_path: Path) -> None:
    _container(tmp_path, IDMAP + "lxc.environment = NVIDIA_VISIBLE_DEVICES=1\n")
    plan = LxcEngine().plan(RuntimeOptions(root=tmp_path, container="c1", devices="0"))
    added = plan.notes["owned_lines"]
    assert isinstance(added, list) and not any("NVIDIA_VISIBLE_DEVICES" in line for line in added)
    assert plan.warnings[0].startswith("the container already sets NVIDIA_VISIBLE_DEVICES=1; kept")


def test_ids_mapped_in_an_included_file_make_the_container_unprivileged(tmp_path: Path) -> None:
    (tmp_path / "etc/lxc").mkdir(parents=True)
    (tmp_path / "etc/lxc/userns.conf").write_text(IDMAP)
    _container(tmp_path, "lxc.include = /etc/lxc/userns.conf\n", lxcpath="srv/lxc")
    plan = LxcEngine().plan(RuntimeOptions(root=tmp_path, container="c1", lxcpath="/srv/lxc"))
    assert plan.changed and plan.notes["config"] == "/srv/lxc/c1/config"


def test_a_linked_file_in_an_included_directory_is_read_under_the_root(tmp_path: Path) -> None:
    # The link's absolute target is a node path: it must be followed under --root, not on this machine.
    (tmp_path / "usr/share/lxc/config").mkdir(parents=True)
    (tmp_path / "usr/share/lxc/config/userns.conf").write_text(IDMAP)
    (tmp_path / "etc/lxc/inc.d").mkdir(parents=True)
    (tmp_path / "etc/lxc/inc.d/userns.conf").symlink_to("/usr/share/lxc/config/userns.conf")
    _container(tmp_path, "lxc.include = /etc/lxc/inc.d\n")
    plan = LxcEngine().plan(RuntimeOptions(root=tmp_path, container="c1"))
    assert plan.changed and plan.notes["owned_lines"] == OURS


def test_a_privileged_container_is_refused_with_the_reason_and_left_alone(tmp_path: Path) -> None:
    config = _container(tmp_path, "lxc.uts.name = c1\n")
    with pytest.raises(ConfigFormatError, match=r"privileged .*only works in unprivileged containers"):
        LxcEngine().plan(RuntimeOptions(root=tmp_path, container="c1"))
    result = run_cli("configure", "lxc", "--root", str(tmp_path), "--container", "c1")
    assert result.exit_code == 5 and "Traceback" not in result.stderr
    assert config.read_text() == "lxc.uts.name = c1\n"


@pytest.mark.parametrize(
    "name, message", [("../x", "not an LXC container name"), ("nope", "there is no LXC container nope")]
)
def test_a_bad_or_missing_container_is_a_usage_error(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        LxcEngine().plan(RuntimeOptions(root=tmp_path, container=name))


def test_revert_removes_exactly_our_lines_and_keeps_an_edit_made_since(tmp_path: Path) -> None:
    original = "lxc.uts.name = c1\n" + IDMAP
    config = _container(tmp_path, original)
    plan = LxcEngine().plan(RuntimeOptions(root=tmp_path, container="c1"))
    apply_changes("lxc", plan.changes, Journal(tmp_path), dict(plan.notes))
    config.write_text(
        config.read_text().replace("lxc.uts.name = c1", "lxc.uts.name = renamed") + "lxc.start.auto = 1\n"
    )
    assert plan_revert(Journal(tmp_path), ["lxc"]).problems == []  # no --force needed
    revert("lxc", Journal(tmp_path))
    assert config.read_text() == "lxc.uts.name = renamed\n" + IDMAP + "lxc.start.auto = 1\n"


def test_revert_of_an_unedited_config_is_byte_for_byte(tmp_path: Path) -> None:
    config = _container(tmp_path, "# no newline at the end\n" + IDMAP.rstrip("\n"))
    before = config.read_bytes()
    plan = LxcEngine().plan(RuntimeOptions(root=tmp_path, container="c1"))
    apply_changes("lxc", plan.changes, Journal(tmp_path), dict(plan.notes))
    revert("lxc", Journal(tmp_path))
    assert config.read_bytes() == before


def test_remove_lines_takes_the_last_occurrence_and_skips_missing_ones() -> None:
    text = "a = 1\nb = 2\na = 1\n"
    assert lineedits.remove_lines(text, ["a = 1", "c = 3"]) == "a = 1\nb = 2\n"
    assert lineedits.owned_lines([{"owned_lines": ["x"]}, {}]) is None


def test_install_without_a_container_plans_nothing_and_names_the_command(tmp_path: Path) -> None:
    _container(tmp_path, IDMAP)
    plan = LxcEngine().plan(RuntimeOptions(root=tmp_path))
    assert not plan.changes and "gpu-airgap configure lxc --container c1" in plan.next_step


class Client:
    """The daemon's client as a recording fake (pure logic: which commands, in which order)."""

    def __init__(self, profile: str, fail: str = "") -> None:
        self.profile = profile
        self.fail = fail
        self.calls: List[List[str]] = []

    def __call__(self, argv: Sequence[str]) -> Tuple[int, str, str]:
        self.calls.append(list(argv))
        if self.fail and self.fail in argv:
            return 1, "", "Error: not found"
        return 0, (self.profile if argv[1:3] == ["profile", "show"] else ""), ""


def test_lxd_profile_commands_skip_what_the_profile_has_and_undo_only_that() -> None:
    assert lxd.render(lxd.setup_commands("incus", "gpu", "all")) == [
        "incus profile set gpu nvidia.runtime=true",
        "incus profile set gpu nvidia.driver.capabilities=all",
        "incus profile device add gpu gpu gpu",
    ]
    client = Client("config:\n  nvidia.runtime: 'true'\ndevices:\n  gpu:\n    type: gpu\n")
    current = lxd.current_profile("lxd", "default", client)
    assert lxd.apply(lxd.setup_commands("lxd", "default", "compute,utility", current), client) == [
        "lxc profile set default nvidia.driver.capabilities=compute,utility"
    ]
    assert lxd.render(lxd.undo_commands("lxd", "default", current)) == [
        "lxc profile unset default nvidia.runtime",
        "lxc profile device remove default gpu",
    ]


def test_lxd_a_failing_client_is_one_sentence() -> None:
    with pytest.raises(ToolError, match="lxc profile show nope failed: Error: not found"):
        lxd.current_profile("lxd", "nope", Client("", fail="nope"))
    result = run_cli("configure", "lxd", "--profile", "gpu")
    assert (
        result.exit_code == 0 and result.stdout.splitlines()[0] == "lxc profile set gpu nvidia.runtime=true"
    )


def test_verify_live_says_it_cannot_start_an_lxc_container_after_the_static_checks_pass(
    tmp_path: Path,
) -> None:
    _container(tmp_path, IDMAP)
    for path in ("usr/share/lxc/hooks/nvidia", "usr/bin/nvidia-container-cli"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert run_cli("configure", "lxc", "--root", str(tmp_path), "--container", "c1").exit_code == 0
    result = run_cli("configure", "verify", "--root", str(tmp_path), "--live")
    assert "ok: lxc: container c1 has the nvidia hook and its environment" in result.stdout
    assert (
        result.exit_code == 1
        and "CANNOT RUN: lxc: live: --live does not start LXC containers" in result.stdout
    )


def test_lxc_lxcpath_of_the_system_config_is_where_containers_are_looked_for(tmp_path: Path) -> None:
    (tmp_path / "etc/lxc").mkdir(parents=True)
    (tmp_path / "etc/lxc/lxc.conf").write_text("lxc.lxcpath = /srv/containers\n")
    config = tmp_path / "srv/containers/c1/config"
    config.parent.mkdir(parents=True)
    config.write_text("lxc.idmap = u 0 100000 65536\n")
    plan = LxcEngine().plan(RuntimeOptions(root=tmp_path, container="c1"))
    assert plan.changes[0].path == config and plan.notes["config"] == "/srv/containers/c1/config"
