"""DockerEngine over the real daemon.json fixture and its edge cases: keys kept, features merged, revert."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from configure.docker import DAEMON_JSON, DockerEngine, detect_style, render_daemon_json
from configure.engine import Engine, RuntimeOptions
from configure.journal import Journal, apply_changes
from configure.revert import revert
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted

FIXTURE = Path(__file__).parent / "data/fixtures/docker/daemon.json"
RUNTIME = "/usr/bin/nvidia-container-runtime"

_engine: Engine = DockerEngine()  # conformance with the Engine protocol, checked by mypy


def _root_with(tmp_path: Path, content: Optional[bytes]) -> Path:
    if content is not None:
        path = rooted(tmp_path, DAEMON_JSON)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return tmp_path


def _plan_and_apply(root: Path, **options: Any) -> Dict[str, Any]:
    plan = DockerEngine().plan(RuntimeOptions(root=root, **options))
    apply_changes("docker", plan.changes, Journal(root), dict(plan.notes))
    return dict(json.loads(rooted(root, DAEMON_JSON).read_bytes()))


def test_save_preserves_unknown_daemon_json_keys_and_their_order(tmp_path: Path) -> None:
    original = json.loads(FIXTURE.read_bytes())
    data = _plan_and_apply(_root_with(tmp_path, FIXTURE.read_bytes()))
    assert list(data) == [*original, "runtimes"]
    for key, value in original.items():
        assert data[key] == value
    assert data["runtimes"] == {"nvidia": {"path": RUNTIME, "args": []}}
    assert "default-runtime" not in data


def test_cdi_is_merged_into_features_not_clobbering_them(tmp_path: Path) -> None:
    data = _plan_and_apply(_root_with(tmp_path, FIXTURE.read_bytes()), cdi=True)
    assert data["features"] == {"buildkit": True, "containerd-snapshotter": True, "cdi": True}
    assert list(data["features"]) == ["buildkit", "containerd-snapshotter", "cdi"]


def test_untouched_lines_keep_their_exact_text(tmp_path: Path) -> None:
    # Same 2-space indent and one-line lists as the fixture: only the lines gaining a comma differ.
    old = FIXTURE.read_text()
    plan = DockerEngine().plan(RuntimeOptions(root=_root_with(tmp_path, old.encode()), cdi=True))
    new = plan.changes[0].new.decode()
    lost = set(old.splitlines()) - set(new.splitlines())
    assert lost == {'    "containerd-snapshotter": true', '  "registry-mirrors": ["https://mirror.gcr.io"]'}


@pytest.mark.parametrize(
    ("text", "expected_indent", "inline_lists"),
    [
        ('{\n    "a": ["x"]\n}\n', "    ", True),
        ('{\n\t"a": 1\n}\n', "\t", True),
        ('{\n  "a": [\n    "x"\n  ]\n}\n', "  ", False),
        ('{"a": 1}', "  ", True),
    ],
    ids=["4-spaces", "tabs", "expanded-lists", "one-line"],
)
def test_output_keeps_the_input_layout(text: str, expected_indent: str, inline_lists: bool) -> None:
    style = detect_style(text)
    assert style.indent == expected_indent
    assert style.inline_scalar_lists is inline_lists
    # Rendering the parsed input back in its own style reproduces it (for these regular layouts).
    if "\n" in text:
        assert render_daemon_json(json.loads(text), style) == text


def test_missing_file_gets_a_minimal_daemon_json(tmp_path: Path) -> None:
    plan = DockerEngine().plan(RuntimeOptions(root=tmp_path))
    assert plan.changes[0].old is None
    data = _plan_and_apply(tmp_path)
    assert data == {"runtimes": {"nvidia": {"path": RUNTIME, "args": []}}}
    assert rooted(tmp_path, DAEMON_JSON).stat().st_mode & 0o777 == 0o644


def test_existing_nvidia_entry_with_another_path_is_repointed_keeping_its_other_keys(tmp_path: Path) -> None:
    content = b'{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": ["--debug"]}}}\n'
    root = _root_with(tmp_path, content)
    plan = DockerEngine().plan(RuntimeOptions(root=root))
    assert any("pointed to nvidia-container-runtime" in w for w in plan.warnings)
    data = _plan_and_apply(root)
    assert data["runtimes"]["nvidia"] == {"path": RUNTIME, "runtimeArgs": ["--debug"], "args": []}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (b"  \n", "the file is empty"),
        (b'{"runtimes": {', "is not valid JSON"),
        (b'["runc"]\n', "top level must be a JSON object"),
        (b'{"features": ["cdi"]}\n', '"features" must be a JSON object'),
        (b'{"runtimes": "nvidia"}\n', '"runtimes" must be a JSON object'),
        (b'{"runtimes": {"nvidia": "/usr/bin/x"}}\n', '"runtimes.nvidia" must be a JSON object'),
        (b'{"a": "\xff"}\n', "is not UTF-8 text"),
        (b'{"log-level": "warn", "log-level": "debug"}\n', 'the key "log-level" appears twice'),
    ],
    ids=[
        "empty",
        "blank",
        "invalid-json",
        "not-an-object",
        "features-list",
        "runtimes-string",
        "entry-string",
        "latin1",
        "duplicate-key",
    ],
)
def test_bad_daemon_json_is_refused_and_left_untouched(tmp_path: Path, content: bytes, message: str) -> None:
    root = _root_with(tmp_path, content)
    with pytest.raises(ConfigFormatError, match=message) as info:
        DockerEngine().plan(RuntimeOptions(root=root, cdi=True))
    assert str(info.value).startswith(str(rooted(root, DAEMON_JSON)))
    assert rooted(root, DAEMON_JSON).read_bytes() == content
    assert Journal(root).entries() == []


def test_read_only_daemon_json(tmp_path: Path) -> None:
    root = _root_with(tmp_path, FIXTURE.read_bytes())
    path = rooted(root, DAEMON_JSON)
    path.chmod(0o444)
    plan = DockerEngine().plan(RuntimeOptions(root=root))
    if os.geteuid() == 0:
        # root may replace a 0444 file (like `vi :w!`); the file keeps its mode.
        apply_changes("docker", plan.changes, Journal(root))
        assert path.stat().st_mode & 0o777 == 0o444
        assert "nvidia" in json.loads(path.read_bytes())["runtimes"]
    else:
        with pytest.raises(ConfigFormatError, match="read-only"):
            apply_changes("docker", plan.changes, Journal(root))
        assert path.read_bytes() == FIXTURE.read_bytes()


def test_default_runtime_is_left_alone_without_set_as_default(tmp_path: Path) -> None:
    root = _root_with(tmp_path, b'{\n  "default-runtime": "runc"\n}\n')
    plan = DockerEngine().plan(RuntimeOptions(root=root))
    assert plan.facts["DEFAULT"] == "runc"
    assert _plan_and_apply(root)["default-runtime"] == "runc"
    # Unset means dockerd's built-in runc, which is what revert and verify need to know.
    assert (
        DockerEngine()
        .plan(RuntimeOptions(root=tmp_path / "new", set_as_default=True))
        .notes["previous_default"]
        == "runc"
    )


def test_set_as_default_records_the_previous_default_and_revert_restores_it_byte_exact(
    tmp_path: Path,
) -> None:
    original = b'{\n    "default-runtime": "crun",\n    "runtimes": {"crun": {"path": "/usr/bin/crun"}}\n}\n'
    root = _root_with(tmp_path, original)
    plan = DockerEngine().plan(RuntimeOptions(root=root, set_as_default=True))
    assert plan.notes["previous_default"] == "crun"
    assert plan.facts["DEFAULT"] == "nvidia"
    assert _plan_and_apply(root, set_as_default=True)["default-runtime"] == "nvidia"
    assert Journal(root).entries()[0].notes["previous_default"] == "crun"
    revert("docker", Journal(root))
    assert rooted(root, DAEMON_JSON).read_bytes() == original


def test_second_run_writes_nothing_even_for_a_hand_formatted_file(tmp_path: Path) -> None:
    root = _root_with(
        tmp_path, b'{"runtimes":{"nvidia":{"path":"/usr/bin/nvidia-container-runtime","args":[]}}}'
    )
    plan = DockerEngine().plan(RuntimeOptions(root=root))
    assert not plan.changed
    root2 = _root_with(tmp_path / "r2", FIXTURE.read_bytes())
    _plan_and_apply(root2, cdi=True, set_as_default=True)
    again = DockerEngine().plan(RuntimeOptions(root=root2, cdi=True, set_as_default=True))
    assert not again.changed
    assert apply_changes("docker", again.changes, Journal(root2)) == []


def test_report_reads_the_written_file_back(tmp_path: Path) -> None:
    root = tmp_path
    rooted(root, DAEMON_JSON).parent.mkdir(parents=True)
    shutil.copy(FIXTURE, rooted(root, DAEMON_JSON))
    assert DockerEngine().report(root, "nvidia") == {"DEFAULT": "runc", "CDI": "false"}
    _plan_and_apply(root, cdi=True)
    assert DockerEngine().report(root, "nvidia") == {
        "RUNTIME": "nvidia",
        "RUNTIME_PATH": RUNTIME,
        "DEFAULT": "runc",
        "CDI": "true",
    }


def test_a_drop_in_is_a_usage_error_because_dockerd_has_none(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="dockerd has no drop-in directory"):
        DockerEngine().plan(RuntimeOptions(root=tmp_path, drop_in="/etc/docker/daemon.d/nvidia.json"))
