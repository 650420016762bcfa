"""``configure toolkit``: one key changes in the runtime's config.toml, every comment stays."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import tomllib

from configure.journal import Journal, apply_changes
from configure.revert import revert
from configure.toolkit import TOOLKIT_CONFIG, plan_mode, set_mode
from plumbing.errors import ConfigFormatError, ExitCode, UsageError
from plumbing.fsutil import rooted
from tests.cli_runner import run_cli

# Shaped like the file the toolkit's postinst writes (`nvidia-ctk config --in-place`): defaults
# commented out, a few keys set, sub-tables after the main one.
CONFIG = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"  # auto picks jit-cdi since v1.18
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false
"""


def _changed_lines(old: str, new: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_setting_the_mode_changes_only_that_line_and_keeps_comments() -> None:
    new = set_mode(CONFIG, "cdi")
    assert _changed_lines(CONFIG, new) == [
        '-mode = "auto"  # auto picks jit-cdi since v1.18',
        '+mode = "cdi"  # auto picks jit-cdi since v1.18',
    ]
    assert tomllib.loads(new)["nvidia-container-runtime"]["modes"]["cdi"]["default-kind"] == "nvidia.com/gpu"


def test_a_commented_mode_stays_and_a_real_key_is_added() -> None:
    old = CONFIG.replace('mode = "auto"  # auto picks jit-cdi since v1.18', '#mode = "auto"')
    new = set_mode(old, "legacy")
    assert '#mode = "auto"' in new
    assert _changed_lines(old, new) == ['+mode = "legacy"']
    assert tomllib.loads(new)["nvidia-container-runtime"]["mode"] == "legacy"


def test_a_file_without_the_section_gets_it_appended() -> None:
    old = "[nvidia-container-cli]\nload-kmods = true\n"
    new = set_mode(old, "csv")
    assert new.startswith(old)
    assert tomllib.loads(new)["nvidia-container-runtime"] == {"mode": "csv"}


@pytest.mark.parametrize(
    ("text", "mode", "error"),
    [
        (CONFIG, "turbo", UsageError),
        ("[nvidia-container-runtime\n", "cdi", ConfigFormatError),
        ("nvidia-container-runtime = 3\n", "cdi", ConfigFormatError),
    ],
    ids=["unknown-mode", "invalid-toml", "section-not-a-table"],
)
def test_bad_input_is_refused(text: str, mode: str, error: type) -> None:
    with pytest.raises(error):
        set_mode(text, mode)


def test_plan_applies_once_then_says_already_configured_and_reverts_byte_exact(tmp_path: Path) -> None:
    path = rooted(tmp_path, TOOLKIT_CONFIG)
    path.parent.mkdir(parents=True)
    path.write_text(CONFIG)
    plan = plan_mode(tmp_path, "cdi")
    assert plan.notes == {"mode": "cdi", "previous_mode": "auto"}
    assert apply_changes("toolkit", plan.changes, Journal(tmp_path), dict(plan.notes)) == [path]
    assert not plan_mode(tmp_path, "cdi").changed
    revert("toolkit", Journal(tmp_path))
    assert path.read_text() == CONFIG


def test_missing_config_is_created_with_a_warning(tmp_path: Path) -> None:
    plan = plan_mode(tmp_path, "cdi")
    assert plan.changes[0].old is None
    assert "does not exist" in plan.warnings[0]
    assert tomllib.loads(plan.changes[0].new.decode()) == {"nvidia-container-runtime": {"mode": "cdi"}}


def test_cli_sets_reports_and_dry_runs(tmp_path: Path) -> None:
    path = rooted(tmp_path, TOOLKIT_CONFIG)
    path.parent.mkdir(parents=True)
    path.write_text(CONFIG)
    dry = run_cli("configure", "toolkit", "--root", str(tmp_path), "--mode", "cdi", "--dry-run")
    assert dry.exit_code == 0
    assert '+mode = "cdi"' in dry.stdout
    assert path.read_text() == CONFIG
    first = run_cli("configure", "toolkit", "--root", str(tmp_path), "--mode", "cdi")
    assert first.exit_code == 0 and f"wrote {path}" in first.stdout
    second = run_cli("configure", "toolkit", "--root", str(tmp_path), "--mode", "cdi")
    assert "already configured" in second.stdout
    shown = run_cli("configure", "toolkit", "--root", str(tmp_path))
    assert shown.stdout.strip() == "MODE=cdi"
    bad = run_cli("configure", "toolkit", "--root", str(tmp_path), "--mode", "fast")
    assert bad.exit_code == ExitCode.USAGE
    assert "Invalid value for '--mode': 'fast' is not one of 'auto', 'cdi'" in bad.stderr
