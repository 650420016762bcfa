"""containerd engine over the real fixture configs and the edge cases NVIDIA's tool gets wrong."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import pytest
import tomllib

from configure.commands import configure_engine
from configure.containerd.engine import CRI_PLUGIN
from configure.engine import RuntimeOptions
from configure.nodefacts import dpkg_containerd_version, kubelet_cgroup_driver, parse_containerd_version
from plumbing.errors import ConfigFormatError, UsageError
from tests.containerd_helpers import CONFIG, DROP_IN, engine, make_root

BINARY = "/usr/bin/nvidia-container-runtime"


def runtime(data: Dict[str, Any], version: int, name: str = "nvidia") -> Dict[str, Any]:
    entry: Dict[str, Any] = data["plugins"][CRI_PLUGIN[version]]["containerd"]["runtimes"][name]
    return entry


# fixture, installed containerd, expected version, drop-in?, expected SystemdCgroup
CASES = [
    ("config.toml.base", (1, 6), 2, False, True),
    ("config-1.6-default.toml", (1, 6), 2, False, False),
    ("config-v2-containerd1-docs.toml", (1, 7), 2, False, False),
    ("config-v3-containerd2-docs.toml", (2, 1), 3, True, None),
]


@pytest.mark.parametrize(("fixture", "installed", "version", "uses_drop_in", "systemd"), CASES)
def test_fixture_gets_nvidia_runtime_keeping_comments_and_parses_with_tomllib(
    tmp_path: Path,
    fixture: str,
    installed: Tuple[int, int],
    version: int,
    uses_drop_in: bool,
    systemd: Optional[bool],
) -> None:
    config = make_root(tmp_path, fixture)
    original = config.read_text()
    result = configure_engine(engine(installed), RuntimeOptions(root=tmp_path, cdi=True))

    written = config.read_text()
    assert [line for line in original.splitlines() if line.lstrip().startswith("#")] == [
        line for line in written.splitlines() if line.lstrip().startswith("#")
    ]
    target = tmp_path / DROP_IN if uses_drop_in else config
    assert target.exists()
    data = tomllib.loads(target.read_text())
    assert data["version"] == version
    entry = runtime(data, version)
    assert entry["runtime_type"] == "io.containerd.runc.v2"
    assert entry["options"]["BinaryName"] == BINARY
    assert entry["options"].get("SystemdCgroup") == systemd
    assert data["plugins"][CRI_PLUGIN[version]]["enable_cdi"] is True
    assert result.plan.facts["DEFAULT"] == "runc"
    if uses_drop_in:
        assert tomllib.loads(written)["imports"] == ["/etc/containerd/conf.d/99-nvidia.toml"]
        # The drop-in carries the whole CRI table, because containerd < 2.1 merges plugins by key.
        assert runtime(data, version, "runc")["sandboxer"] == "podsandbox"
    else:
        # In place: only additions; every original line is still there, in order.
        assert _is_subsequence(original.splitlines(), written.splitlines())


def test_version_2_config_on_containerd_2_gets_a_version_2_drop_in_not_version_3(tmp_path: Path) -> None:
    # containerd 2.x reads (and `config dump` reports) a migrated version; the file on disk says 2.
    config = make_root(tmp_path, "config.toml.base")
    result = configure_engine(engine((2, 0)), RuntimeOptions(root=tmp_path))
    root_config = tomllib.loads(config.read_text())
    assert root_config["version"] == 2 and root_config["imports"] == ["/etc/containerd/conf.d/99-nvidia.toml"]
    drop_in = tomllib.loads((tmp_path / DROP_IN).read_text())
    assert drop_in["version"] == 2
    assert runtime(drop_in, 2)["options"]["BinaryName"] == BINARY
    assert CRI_PLUGIN[3] not in drop_in["plugins"]
    assert result.plan.facts["CONFIG_VERSION"] == "2"


@pytest.mark.parametrize("fixture", [case[0] for case in CASES])
def test_second_run_changes_nothing(tmp_path: Path, fixture: str) -> None:
    make_root(tmp_path, fixture)
    configure_engine(engine((2, 1) if "v3" in fixture else (1, 6)), RuntimeOptions(root=tmp_path))
    again = configure_engine(engine((2, 1) if "v3" in fixture else (1, 6)), RuntimeOptions(root=tmp_path))
    assert again.already_configured
    assert again.written == []


def test_headers_are_quoted_and_systemd_cgroup_is_a_boolean(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    configure_engine(engine(), RuntimeOptions(root=tmp_path))
    text = config.read_text()
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in text
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]' in text
    assert "SystemdCgroup = true\n" in text.split("runtimes.nvidia.options]")[1]


@pytest.mark.parametrize(
    ("installed", "version", "files"), [((1, 6), 2, [CONFIG]), ((2, 0), 3, [CONFIG, DROP_IN])]
)
@pytest.mark.parametrize("content", [None, ""])
def test_missing_or_empty_config_gets_a_minimal_valid_one(
    tmp_path: Path, installed: Tuple[int, int], version: int, files: list[str], content: Optional[str]
) -> None:
    make_root(tmp_path, text=content)
    plan = engine(installed, kubelet="systemd").plan(RuntimeOptions(root=tmp_path))
    assert sorted(str(c.path.relative_to(tmp_path)) for c in plan.changes) == sorted(files)
    rendered = {str(c.path.relative_to(tmp_path)): tomllib.loads(c.new.decode()) for c in plan.changes}
    data = rendered[files[-1]]
    assert rendered[CONFIG]["version"] == version
    assert runtime(data, version)["options"] == {"BinaryName": BINARY, "SystemdCgroup": True}
    # Defining runtimes hides containerd's built-in runc, and runc stays the default: keep it defined.
    assert runtime(data, version, "runc")["runtime_type"] == "io.containerd.runc.v2"


def test_existing_nvidia_entry_with_another_path_is_updated_and_the_plan_says_so(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    old = config.read_text() + (
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
        "  # keep me\n"
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        '    BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n'
    )
    config.write_text(old)
    result = configure_engine(engine(), RuntimeOptions(root=tmp_path))
    assert any("/usr/local/nvidia/toolkit/nvidia-container-runtime" in w for w in result.plan.warnings)
    text = config.read_text()
    assert runtime(tomllib.loads(text), 2)["options"]["BinaryName"] == BINARY
    assert "# keep me" in text
    assert text.count("runtimes.nvidia]") == 1


@pytest.mark.parametrize(
    ("imports", "import_added"),
    [
        (["/etc/containerd/conf.d/*.toml"], False),
        (["conf.d/9*.toml"], False),
        (["/etc/containerd/other.toml"], True),
    ],
)
def test_existing_imports_mean_a_drop_in_whose_import_is_added_only_when_not_covered(
    tmp_path: Path, imports: list[str], import_added: bool
) -> None:
    config = make_root(tmp_path, "config.toml.base")
    text = config.read_text().replace(
        "version = 2\n", f"version = 2\nimports = {imports!r}\n".replace("'", '"')
    )
    config.write_text(text)
    (tmp_path / "etc/containerd/other.toml").write_text("version = 2\n")
    result = configure_engine(engine(), RuntimeOptions(root=tmp_path))
    assert tomllib.loads(config.read_text())["imports"] == (
        [*imports, "/etc/containerd/conf.d/99-nvidia.toml"] if import_added else imports
    )
    if not import_added:
        assert config.read_text() == text
    drop_in = tomllib.loads((tmp_path / DROP_IN).read_text())
    assert runtime(drop_in, 2)["options"]["SystemdCgroup"] is True
    assert drop_in["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] == "registry.k8s.io/pause:3.9"
    assert result.plan.facts["RUNTIME"] == "nvidia"


def test_drop_in_copies_the_cri_table_of_the_last_import_that_defines_it(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    config.write_text(
        config.read_text().replace(
            "version = 2\n", 'version = 2\nimports = ["/etc/containerd/10-site.toml"]\n'
        )
    )
    (tmp_path / "etc/containerd/10-site.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "site/pause:1"\n'
    )
    configure_engine(engine(), RuntimeOptions(root=tmp_path))
    cri = tomllib.loads((tmp_path / DROP_IN).read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "site/pause:1"  # what containerd 1.x actually used before us
    assert set(cri["containerd"]["runtimes"]) == {"nvidia", "runc"}


@pytest.mark.parametrize(
    ("no_drop_in", "ours", "later"),
    [
        (False, "/etc/containerd/conf.d/99-nvidia.toml", ["99-zz-site.toml"]),
        # edited in place: every import is loaded after the root config, so both files can hide it
        (True, "/etc/containerd/config.toml", ["10-site.toml", "99-zz-site.toml"]),
    ],
    ids=["drop-in", "in-place"],
)
def test_a_file_loaded_after_ours_that_redefines_the_cri_table_is_warned_about(
    tmp_path: Path, no_drop_in: bool, ours: str, later: list[str]
) -> None:
    config = make_root(tmp_path, "config.toml.base")
    config.write_text(
        config.read_text().replace(
            "version = 2\n", 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
        )
    )
    cri = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "site/pause:1"\n'
    conf_d = tmp_path / "etc/containerd/conf.d"
    conf_d.mkdir(exist_ok=True)
    (conf_d / "99-zz-site.toml").write_text(cri)  # sorts after 99-nvidia.toml: containerd loads it later
    (conf_d / "10-site.toml").write_text(cri)  # sorts before the drop-in, which copies its CRI table
    result = configure_engine(engine(), RuntimeOptions(root=tmp_path, no_drop_in=no_drop_in))
    assert [w for w in result.plan.warnings if "redefines" in w] == [
        f"/etc/containerd/conf.d/{name} is loaded after {ours} and redefines plugins.io.containerd.grpc.v1.cri; "
        "containerd before 2.1 would then not see the nvidia runtime"
        for name in later
    ]


def test_v1_config_is_edited_in_place_even_with_imports_and_refuses_a_drop_in(tmp_path: Path) -> None:
    config = make_root(
        tmp_path, text='imports = ["/etc/containerd/conf.d/*.toml"]\n[plugins.cri]\n  sandbox_image = "p"\n'
    )
    result = configure_engine(engine(), RuntimeOptions(root=tmp_path))
    assert [c.path for c in result.plan.changes] == [config]
    data = tomllib.loads(config.read_text())
    assert "version" not in data
    assert data["plugins"]["cri"]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == BINARY
    assert not (tmp_path / DROP_IN).exists()
    with pytest.raises(UsageError, match="version 1"):
        engine().plan(RuntimeOptions(root=tmp_path, drop_in="/etc/containerd/conf.d/99-nvidia.toml"))


@pytest.mark.parametrize(
    ("version", "name"),
    [(1, "cri"), (2, "cri"), (2, "io.containerd.grpc.v1.cri"), (3, "io.containerd.cri.v1.runtime")],
)
def test_config_that_disables_cri_is_refused_untouched(tmp_path: Path, version: int, name: str) -> None:
    config = make_root(tmp_path, text=f'version = {version}\ndisabled_plugins = ["{name}"]\n')
    before = config.read_bytes()
    with pytest.raises(ConfigFormatError, match="disables the CRI plugin"):
        configure_engine(engine(), RuntimeOptions(root=tmp_path))
    assert config.read_bytes() == before


def test_invalid_toml_names_the_file_and_leaves_it_untouched(tmp_path: Path) -> None:
    config = make_root(tmp_path, text='version = 2\n[plugins."io.containerd.grpc.v1.cri"\n')
    with pytest.raises(ConfigFormatError, match=r"config\.toml: is not valid TOML"):
        configure_engine(engine(), RuntimeOptions(root=tmp_path))
    assert config.read_text() == 'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n'
    assert not (tmp_path / "var").exists()


def test_read_only_config_is_refused_before_any_write_unless_root(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    config.write_text(config.read_text().replace("version = 2\n", 'version = 2\nimports = ["/x.toml"]\n'))
    config.chmod(0o444)
    before = config.read_bytes()
    if os.geteuid() == 0:
        # root may replace a 0444 file (as dpkg and `vi :w!` do); the file keeps its mode.
        configure_engine(engine(), RuntimeOptions(root=tmp_path))
        assert config.stat().st_mode & 0o777 == 0o444
        assert (tmp_path / DROP_IN).exists()
        return
    with pytest.raises(ConfigFormatError, match="read-only"):
        configure_engine(engine(), RuntimeOptions(root=tmp_path))
    assert config.read_bytes() == before
    assert not (tmp_path / DROP_IN).exists()  # the drop-in is not written half-way either


NO_SYSTEMD = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'


@pytest.mark.parametrize(
    ("kubelet", "flag", "expected"),
    [
        ("systemd", "auto", True),
        ("cgroupfs", "auto", False),
        ("systemd", "false", False),
        (None, "true", True),
    ],
)
def test_systemd_cgroup_follows_flag_then_kubelet(
    tmp_path: Path, kubelet: Optional[str], flag: str, expected: bool
) -> None:
    make_root(tmp_path, text=NO_SYSTEMD)
    plan = engine(kubelet=kubelet).plan(RuntimeOptions(root=tmp_path, systemd_cgroup=flag))
    data = tomllib.loads(plan.changes[-1].new.decode())
    assert runtime(data, 2)["options"]["SystemdCgroup"] is expected


def test_systemd_cgroup_without_any_source_is_left_unset_with_a_warning(tmp_path: Path) -> None:
    make_root(tmp_path, text=NO_SYSTEMD)
    plan = engine().plan(RuntimeOptions(root=tmp_path))
    assert "SystemdCgroup" not in runtime(tomllib.loads(plan.changes[-1].new.decode()), 2)["options"]
    assert any("SystemdCgroup is left unset" in w for w in plan.warnings)


def test_kubelet_config_under_the_root_is_read(tmp_path: Path) -> None:
    assert kubelet_cgroup_driver(tmp_path) is None
    path = tmp_path / "var/lib/kubelet/config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
    )
    assert kubelet_cgroup_driver(tmp_path) == "systemd"
    path.write_text("kind: KubeletConfiguration\n")
    assert kubelet_cgroup_driver(tmp_path) == "cgroupfs"  # the kubelet's own default


def test_set_as_default_records_the_previous_default(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    result = configure_engine(engine(), RuntimeOptions(root=tmp_path, set_as_default=True))
    assert result.plan.notes["previous_default"] == "runc"
    assert result.plan.facts["DEFAULT"] == "nvidia"
    cri = tomllib.loads(config.read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"


def test_containerd_version_comes_from_the_binary_text_or_dpkg_status() -> None:
    assert parse_containerd_version(
        "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
    ) == (1, 6)
    assert parse_containerd_version("containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7") == (2, 1)
    status = (
        "Package: containerd.io\nStatus: install ok installed\nVersion: 2.0.5-1\n\n"
        "Package: runc\nStatus: install ok installed\nVersion: 1.1.12\n"
    )
    assert dpkg_containerd_version(status) == (2, 0)
    assert (
        dpkg_containerd_version(status.replace("install ok installed", "deinstall ok config-files")) is None
    )


def _is_subsequence(small: list[str], big: list[str]) -> bool:
    it = iter(big)
    return all(line in it for line in small)


def test_drop_in_naming_the_main_config_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    config = make_root(tmp_path, text="version = 2\n")
    with pytest.raises(UsageError, match="is the main config itself; use --no-drop-in"):
        configure_engine(engine(), RuntimeOptions(root=tmp_path, drop_in="/etc/containerd/./config.toml"))
    assert config.read_text() == "version = 2\n"


@pytest.mark.parametrize(
    ("root_text", "site_text", "culprit"),
    [
        ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  containerd = 3\n', None, CONFIG),
        (
            'version = 2\nimports = ["/etc/containerd/10-site.toml"]\n',
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  runtimes = 3\n',
            "etc/containerd/10-site.toml",
        ),
    ],
)
def test_a_value_where_the_runtime_table_goes_names_the_file_that_holds_it(
    tmp_path: Path, root_text: str, site_text: Optional[str], culprit: str
) -> None:
    make_root(tmp_path, text=root_text)
    if site_text is not None:
        (tmp_path / "etc/containerd/10-site.toml").write_text(site_text)
    with pytest.raises(ConfigFormatError, match="is a value, not a table") as caught:
        configure_engine(engine(), RuntimeOptions(root=tmp_path))
    assert str(caught.value).startswith(f"{tmp_path / culprit}: plugins.io.containerd.grpc.v1.cri.containerd")


#: the config.toml Debian 12's containerd package installs (no runtimes table: runc is added too)
DEBIAN_PACKAGED = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""


def test_a_second_configure_of_debians_packaged_config_keeps_its_bytes_and_reports_no_change(
    tmp_path: Path,
) -> None:
    config = make_root(tmp_path, text=DEBIAN_PACKAGED)
    first = engine().plan(RuntimeOptions(root=tmp_path))
    assert first.changed
    config.write_bytes(first.changes[-1].new)
    second = engine().plan(RuntimeOptions(root=tmp_path))
    # tomlkit re-lays the runc table it merged into; the values are the same, so the bytes stay
    assert not second.changed and second.changes[-1].new == first.changes[-1].new


def test_someone_elses_drop_in_of_another_config_version_is_refused_untouched(tmp_path: Path) -> None:
    make_root(tmp_path, "config-v2-containerd1-docs.toml")
    drop_in = tmp_path / DROP_IN
    drop_in.parent.mkdir(parents=True)
    drop_in.write_text('version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.kata]\n')
    with pytest.raises(ConfigFormatError) as refused:
        configure_engine(engine((2, 0)), RuntimeOptions(root=tmp_path))
    assert str(refused.value) == (
        f"{drop_in}: was not written by gpu-airgap and has config version 3, not 2 like the root config; "
        "gpu-airgap adds to it but will not mix versions: give it version 2, move it aside, or "
        "write to another file (`gpu-airgap configure containerd --drop-in FILE`)"
    )
    assert drop_in.read_text().startswith("version = 3\n")


def test_someone_elses_drop_in_that_was_not_imported_is_added_to_with_a_warning_that_it_now_loads(
    tmp_path: Path,
) -> None:
    make_root(tmp_path, "config.toml.base")  # no imports: containerd does not read conf.d today
    drop_in = tmp_path / DROP_IN
    drop_in.parent.mkdir(parents=True)
    drop_in.write_text(
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]\n  runtime_type = "k"\n'
    )
    result = configure_engine(engine((2, 0)), RuntimeOptions(root=tmp_path))
    assert (
        "containerd did not load /etc/containerd/conf.d/99-nvidia.toml until now; the import added for it "
        "also loads everything else it holds"
    ) in result.plan.warnings
    written = tomllib.loads(drop_in.read_text())
    assert runtime(written, 2, "kata") == {"runtime_type": "k"}  # kept
    assert runtime(written, 2)["options"]["BinaryName"] == BINARY
