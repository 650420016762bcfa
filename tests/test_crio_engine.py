"""CrioEngine over the real crio.conf (CRI-O 1.17) and the packaged 10-crio.conf drop-in; the OCI hook."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
import tomllib

from configure.crio import CRIO_CONF, CRIO_DROP_IN, CRIO_DROP_IN_DIR, OCI_HOOK, CrioEngine
from configure.engine import Engine, RuntimeOptions
from configure.journal import Journal, apply_changes
from configure.revert import revert
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted

FIXTURES = Path(__file__).parent / "data/fixtures/crio"
RUNTIME = "/usr/bin/nvidia-container-runtime"

_engine: Engine = CrioEngine()


def _node(tmp_path: Path, *, crio_conf: bool = True, packaged_drop_in: bool = False) -> Path:
    """A root with the fixture crio.conf and/or the packaged 10-crio.conf drop-in."""
    rooted(tmp_path, CRIO_DROP_IN_DIR).mkdir(parents=True)
    if crio_conf:
        shutil.copy(FIXTURES / "crio.conf", rooted(tmp_path, CRIO_CONF))
    if packaged_drop_in:
        shutil.copy(FIXTURES / "10-crio.conf", rooted(tmp_path, CRIO_DROP_IN_DIR + "/10-crio.conf"))
    return tmp_path


def _apply(root: Path, **options: Any) -> Dict[str, Any]:
    plan = CrioEngine().plan(RuntimeOptions(root=root, **options))
    apply_changes("crio", plan.changes, Journal(root), dict(plan.notes))
    return tomllib.loads(rooted(root, CRIO_DROP_IN).read_text())


def _nvidia(drop_in: Dict[str, Any]) -> Dict[str, Any]:
    return dict(drop_in["crio"]["runtime"]["runtimes"]["nvidia"])


@pytest.mark.parametrize(
    ("crio_conf", "packaged", "conmon", "expected"),
    [
        (True, False, None, {"runtime_root": "/run/runc"}),
        (True, False, "/usr/bin/conmon", {"runtime_root": "/run/runc", "monitor_path": "/usr/bin/conmon"}),
        (True, True, None, {"runtime_root": "/run/crun", "monitor_path": "/usr/libexec/crio/conmon"}),
        (False, True, None, {"runtime_root": "/run/crun", "monitor_path": "/usr/libexec/crio/conmon"}),
        (False, False, None, {}),
    ],
    ids=["crio.conf-runc", "crio.conf-global-conmon", "drop-in-crun-wins", "drop-in-only", "nothing"],
)
def test_drop_in_inherits_monitor_path_and_runtime_root_from_the_effective_default(
    tmp_path: Path, crio_conf: bool, packaged: bool, conmon: Optional[str], expected: Dict[str, str]
) -> None:
    root = _node(tmp_path, crio_conf=crio_conf, packaged_drop_in=packaged)
    if conmon:
        path = rooted(root, CRIO_CONF)
        path.write_text(path.read_text().replace('conmon = ""', f'conmon = "{conmon}"'))
    before = rooted(root, CRIO_CONF).read_bytes() if crio_conf else None
    plan = CrioEngine().plan(RuntimeOptions(root=root))
    assert [c.path for c in plan.changes] == [rooted(root, CRIO_DROP_IN)]  # crio.conf is never written
    assert bool(plan.warnings) is (not expected)  # nothing to inherit from is said out loud
    assert _nvidia(_apply(root)) == {"runtime_path": RUNTIME, "runtime_type": "oci", **expected}
    if before is not None:
        assert rooted(root, CRIO_CONF).read_bytes() == before


def test_default_runtime_only_with_set_as_default_and_the_previous_one_is_recorded(tmp_path: Path) -> None:
    root = _node(tmp_path, packaged_drop_in=True)
    assert "default_runtime" not in _apply(root)["crio"]["runtime"]
    assert CrioEngine().report(root, "nvidia")["DEFAULT"] == "crun"
    plan = CrioEngine().plan(RuntimeOptions(root=root, set_as_default=True))
    assert plan.notes["previous_default"] == "crun"
    assert plan.facts["DEFAULT"] == "nvidia"
    drop_in = _apply(root, set_as_default=True)
    assert drop_in["crio"]["runtime"]["default_runtime"] == "nvidia"
    # The default is now ours, yet a second run still inherits from crun and changes nothing.
    again = CrioEngine().plan(RuntimeOptions(root=root, set_as_default=True))
    assert not again.changed
    assert again.notes["inherited_from"] == "crun"


def test_revert_removes_the_drop_in_it_created(tmp_path: Path) -> None:
    root = _node(tmp_path, packaged_drop_in=True)
    _apply(root, set_as_default=True)
    revert("crio", Journal(root))
    assert not rooted(root, CRIO_DROP_IN).exists()
    assert sorted(p.name for p in rooted(root, CRIO_DROP_IN_DIR).iterdir()) == ["10-crio.conf"]


def test_existing_drop_in_keeps_its_comments_and_other_keys(tmp_path: Path) -> None:
    root = _node(tmp_path, packaged_drop_in=True)
    text = (
        "# site settings, keep me\n"
        "[crio.runtime.runtimes.nvidia]\n"
        'runtime_path = "/opt/old/nvidia-container-runtime"  # old path\n'
        'allowed_annotations = ["io.kubernetes.cri-o.Devices"]\n'
    )
    rooted(root, CRIO_DROP_IN).write_text(text)
    plan = CrioEngine().plan(RuntimeOptions(root=root))
    new = plan.changes[0].new.decode()
    assert new.startswith("# site settings, keep me\n")
    assert f'runtime_path = "{RUNTIME}"  # old path' in new
    assert tomllib.loads(new)["crio"]["runtime"]["runtimes"]["nvidia"]["allowed_annotations"] == [
        "io.kubernetes.cri-o.Devices"
    ]


def test_no_drop_in_edits_crio_conf_in_place_keeping_its_comments(tmp_path: Path) -> None:
    root = _node(tmp_path)
    old = rooted(root, CRIO_CONF).read_text()
    plan = CrioEngine().plan(RuntimeOptions(root=root, no_drop_in=True))
    assert [c.path for c in plan.changes] == [rooted(root, CRIO_CONF)]
    new = plan.changes[0].new.decode()
    assert "# default_runtime is the _name_ of the OCI runtime to be used as the default." in new
    assert set(old.splitlines()) <= set(new.splitlines())
    nvidia = tomllib.loads(new)["crio"]["runtime"]["runtimes"]["nvidia"]
    assert nvidia == {"runtime_path": RUNTIME, "runtime_type": "oci", "runtime_root": "/run/runc"}


def test_warns_about_a_later_drop_in_that_overrides_ours_and_a_directory_crio_never_reads(
    tmp_path: Path,
) -> None:
    root = _node(tmp_path, packaged_drop_in=True)
    rooted(root, CRIO_DROP_IN_DIR + "/99-zz-site.conf").write_text(
        '[crio.runtime]\ndefault_runtime = "crun"\n'
    )
    plan = CrioEngine().plan(RuntimeOptions(root=root, set_as_default=True))
    assert any(
        "99-zz-site.conf is read after 99-nvidia.toml and sets default_runtime" in w for w in plan.warnings
    )
    plan = CrioEngine().plan(RuntimeOptions(root=root, drop_in="/etc/crio/conf.d/99-nvidia.toml"))
    assert any("may never be read" in w for w in plan.warnings)


def test_invalid_toml_in_crio_conf_is_refused(tmp_path: Path) -> None:
    root = _node(tmp_path, crio_conf=False)
    rooted(root, CRIO_CONF).write_text("[crio.runtime\n")
    with pytest.raises(ConfigFormatError, match="is not valid TOML"):
        CrioEngine().plan(RuntimeOptions(root=root))
    assert not rooted(root, CRIO_DROP_IN).exists()


@pytest.mark.parametrize("text", ['crio = "x"\n', "[crio]\nruntime = 3\n"])
def test_a_crio_conf_without_runtime_tables_inherits_nothing_instead_of_crashing(
    tmp_path: Path, text: str
) -> None:
    root = _node(tmp_path, crio_conf=False)
    rooted(root, CRIO_CONF).write_text(text)
    plan = CrioEngine().plan(RuntimeOptions(root=root))
    assert any("no default, runc or crun runtime" in w for w in plan.warnings)
    assert plan.facts["RUNTIME_PATH"] == RUNTIME
    assert "DEFAULT" not in CrioEngine().report(root, "nvidia")


def test_hook_mode_writes_the_oci_hook_instead_of_a_runtime(tmp_path: Path) -> None:
    root = _node(tmp_path, packaged_drop_in=True)
    plan = CrioEngine().plan(RuntimeOptions(root=root, hook=True))
    assert [c.path for c in plan.changes] == [rooted(root, OCI_HOOK)]
    apply_changes("crio", plan.changes, Journal(root))
    assert json.loads(rooted(root, OCI_HOOK).read_bytes()) == {
        "version": "1.0.0",
        "hook": {
            "path": "/usr/bin/nvidia-container-runtime-hook",
            "args": ["nvidia-container-runtime-hook", "prestart"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        },
        "when": {"always": True, "commands": [".*"]},
        "stages": ["prestart"],
    }
    assert not CrioEngine().plan(RuntimeOptions(root=root, hook=True)).changed
    assert CrioEngine().report(root, "nvidia")["HOOK"] == OCI_HOOK


def test_hook_next_to_a_relocated_runtime_gets_its_directory_on_path(tmp_path: Path) -> None:
    root = _node(tmp_path)
    options = RuntimeOptions(
        root=root, hook=True, runtime_path="/usr/local/nvidia/toolkit/nvidia-container-runtime"
    )
    hook = json.loads(CrioEngine().plan(options).changes[0].new)["hook"]
    assert hook["path"] == "/usr/local/nvidia/toolkit/nvidia-container-runtime-hook"
    assert hook["env"] == [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/nvidia/toolkit"
    ]


def test_report_reads_the_effective_configuration_back(tmp_path: Path) -> None:
    root = _node(tmp_path, packaged_drop_in=True)
    assert CrioEngine().report(root, "nvidia") == {"DEFAULT": "crun"}
    _apply(root)
    assert CrioEngine().report(root, "nvidia") == {
        "RUNTIME": "nvidia",
        "RUNTIME_TYPE": "oci",
        "RUNTIME_PATH": RUNTIME,
        "DEFAULT": "crun",
    }


def test_a_relative_runtime_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="absolute --runtime-path"):
        CrioEngine().plan(RuntimeOptions(root=_node(tmp_path), runtime_path="nvidia-container-runtime"))
