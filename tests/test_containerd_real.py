"""The real containerd (Debian's 1.6) accepts every config we write, and starts with the nvidia runtime."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

import pytest
import tomllib

from configure.commands import configure_engine, revert_engines
from configure.engine import RuntimeOptions
from tests.containerd_helpers import CONFIG, DROP_IN, engine, make_root

pytestmark = pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd is not installed")


def dump(config: Path) -> str:
    """``containerd --config FILE config dump``: containerd's own parse of the merged config."""
    result = subprocess.run(
        ["containerd", "--config", str(config), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def point_imports_under(root: Path) -> Path:
    """containerd reads imports as node paths; aim the test root's import at the file under the root."""
    config = root / CONFIG
    config.write_text(config.read_text().replace('"/etc/containerd/', f'"{root}/etc/containerd/'))
    return config


# Every config shape we write for containerd 1.x (containerd 1.6 cannot load version 3).
SHAPES = [
    ("config.toml.base", None, {}),
    ("config-1.6-default.toml", None, {"cdi": True}),
    ("config-v2-containerd1-docs.toml", None, {"set_as_default": True}),
    (None, None, {}),  # missing file
    (None, "", {}),  # empty file
    (None, '[plugins.cri]\n  sandbox_image = "registry.k8s.io/pause:3.6"\n', {}),  # version 1
    ("config.toml.base", "imports", {}),  # drop-in with an added import
    ("config.toml.base", "glob", {"systemd_cgroup": "false"}),  # drop-in under an existing glob
]


@pytest.mark.parametrize(("fixture", "variant", "flags"), SHAPES)
def test_containerd_config_dump_accepts_what_we_write(
    tmp_path: Path, fixture: Optional[str], variant: Optional[str], flags: dict[str, object]
) -> None:
    config = make_root(tmp_path, fixture, text=variant if fixture is None else None)
    if variant in ("imports", "glob"):
        imports = (
            '["/etc/containerd/other.toml"]' if variant == "imports" else '["/etc/containerd/conf.d/*.toml"]'
        )
        config.write_text(config.read_text().replace("version = 2\n", f"version = 2\nimports = {imports}\n"))
        (tmp_path / "etc/containerd/other.toml").write_text("version = 2\n")
    configure_engine(engine(), RuntimeOptions(root=tmp_path, **flags))  # type: ignore[arg-type]
    if variant in ("imports", "glob"):
        assert (tmp_path / DROP_IN).exists()
        point_imports_under(tmp_path)
    merged = dump(config)
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in merged
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in merged
    # runc is still defined, so the default runtime resolves.
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]' in merged
    expected_default = "nvidia" if flags.get("set_as_default") else "runc"
    assert f'default_runtime_name = "{expected_default}"' in merged


def test_containerd_starts_with_our_config_and_lists_the_nvidia_runtime(tmp_path: Path) -> None:
    node = tmp_path / "node"
    make_root(node, "config.toml.base")
    configure_engine(engine(), RuntimeOptions(root=node))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    socket = run_dir / "containerd.sock"
    # A private socket, root and state; the native snapshotter needs no overlay mount privileges.
    text = (node / CONFIG).read_text()
    text = text.replace('root = "/var/lib/containerd"', f'root = "{run_dir}/root"')
    text = text.replace('state = "/run/containerd"', f'state = "{run_dir}/state"')
    text = text.replace('address = "/run/containerd/containerd.sock"', f'address = "{socket}"')
    text = text.replace('snapshotter = "overlayfs"', 'snapshotter = "native"')
    config = run_dir / "config.toml"
    config.write_text(text)
    log_path = run_dir / "containerd.log"
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen(
            ["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        try:
            plugins = _wait_for_cri(socket, daemon)
            assert plugins is not None, log_path.read_text()[-3000:]
            assert any(
                line.split()[:2] == ["io.containerd.grpc.v1", "cri"] and line.split()[-1] == "ok"
                for line in plugins
            )
            started = log_path.read_text()
            runtime_line = started.split("Runtimes:map[", 1)[1]
            assert "nvidia:{Type:io.containerd.runc.v2" in runtime_line
            assert "BinaryName:/usr/bin/nvidia-container-runtime SystemdCgroup:true" in runtime_line
            assert "DefaultRuntimeName:runc" in started
        finally:
            daemon.terminate()
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=10)


def _wait_for_cri(socket: Path, daemon: subprocess.Popen[bytes], timeout: float = 20) -> Optional[list[str]]:
    """Poll ``ctr plugins ls`` until CRI reports, the daemon dies, or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and daemon.poll() is None:
        if socket.exists():
            result = subprocess.run(
                ["ctr", "--address", str(socket), "plugins", "ls"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            lines = [
                line
                for line in result.stdout.splitlines()
                if "io.containerd.grpc.v1" in line and " cri " in line
            ]
            if result.returncode == 0 and lines:
                return lines
        time.sleep(0.2)
    return None


KATA_DROP_IN = (
    "# kata for the confidential workloads (ours, not gpu-airgap's)\n"
    "version = 2\n"
    "\n"
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]\n'
    '  runtime_type = "io.containerd.kata.v2"\n'
)


def runtimes_loaded(root: Path) -> dict[str, Any]:
    """The CRI runtimes the real containerd loads from the root config and its imports."""
    config = root / CONFIG
    pointed = config.read_text().replace('"/etc/containerd/', f'"{root}/etc/containerd/')
    probe = config.with_name("probe.toml")
    probe.write_text(pointed)
    try:
        cri = tomllib.loads(dump(probe))["plugins"]["io.containerd.grpc.v1.cri"]
    finally:
        probe.unlink()
    runtimes: dict[str, Any] = cri["containerd"]["runtimes"]
    return runtimes


def test_an_admins_own_drop_in_at_our_name_is_added_to_and_comes_back_byte_exact(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    config.write_text(
        config.read_text().replace(
            "version = 2\n", 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
        )
    )
    drop_in = tmp_path / DROP_IN
    drop_in.parent.mkdir(parents=True)
    drop_in.write_text(KATA_DROP_IN)
    before = {path: path.read_bytes() for path in (config, drop_in)}

    done = configure_engine(engine(), RuntimeOptions(root=tmp_path))
    assert done.written == [drop_in]
    loaded = runtimes_loaded(tmp_path)
    assert loaded["kata"]["runtime_type"] == "io.containerd.kata.v2"
    assert loaded["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert "runc" in loaded  # the default runtime still resolves
    text = drop_in.read_text()
    assert text.startswith(KATA_DROP_IN.split("\n\n")[0])  # the admin's comment and version stay first
    assert any(
        "was not written by gpu-airgap: adding the nvidia runtime to it" in w for w in done.plan.warnings
    )

    again = configure_engine(engine(), RuntimeOptions(root=tmp_path))
    assert again.already_configured  # the admin's file stays the admin's: added to, not regenerated
    assert "kata" in runtimes_loaded(tmp_path)

    revert_engines(tmp_path)
    assert {path: path.read_bytes() for path in (config, drop_in)} == before


def test_our_drop_in_edited_since_keeps_the_edit_on_the_next_run(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    config.write_text(
        config.read_text().replace(
            "version = 2\n", 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
        )
    )
    configure_engine(engine(), RuntimeOptions(root=tmp_path))
    drop_in = tmp_path / DROP_IN
    generated = drop_in.read_bytes()
    assert generated.startswith(b"# Written by gpu-airgap")
    # Regenerating an unedited drop-in of ours changes nothing...
    assert configure_engine(engine(), RuntimeOptions(root=tmp_path)).already_configured
    # ...but once an admin added kata to it, it is theirs too: the next run keeps kata.
    drop_in.write_text(drop_in.read_text() + KATA_DROP_IN.split("\n\n")[1])
    configure_engine(engine(), RuntimeOptions(root=tmp_path, runtime_name="gpu"))
    loaded = runtimes_loaded(tmp_path)
    assert {"kata", "nvidia", "gpu"} <= set(loaded)


def test_a_second_runtime_name_keeps_the_first_in_our_regenerated_drop_in(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    config.write_text(
        config.read_text().replace(
            "version = 2\n", 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
        )
    )
    original = config.read_bytes()
    configure_engine(engine(), RuntimeOptions(root=tmp_path))
    configure_engine(
        engine(), RuntimeOptions(root=tmp_path, runtime_name="gpu", runtime_path="/usr/bin/gpu-rt")
    )
    loaded = runtimes_loaded(tmp_path)
    assert loaded["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert loaded["gpu"]["options"]["BinaryName"] == "/usr/bin/gpu-rt"
    assert (tmp_path / DROP_IN).read_text().startswith("# Written by gpu-airgap")  # still ours, regenerated
    revert_engines(tmp_path)
    assert config.read_bytes() == original and not (tmp_path / DROP_IN).exists()
