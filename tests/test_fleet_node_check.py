"""Issue 24 items 11, 12 and 20 on the fleet paths: the Ansible role's and the DaemonSet's first check.

The Ansible role checks the node tool on the controller with ``files/verify-node-tool.sh``; the
DaemonSet's program (``mirror/fleet/data/k8s-node.py``) on each node with ``node_tool``. Both run the
real ``gpgv`` against real bundles and keys and decide as the node command does
(``installer.nodecheck``): a bundle the old and the new operator key both signed passes with either
key alone, an unknown signer, a SHA-1 signature and a signature by a key of the file other than the
pinned one (``gpu_airgap_fingerprint``, ``fleet k8s --fingerprint``) are refused with a reason, and
the pin goes on to the installer. The node command and install.sh: tests/test_node_rotation.py.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml

from installer import nodecheck
from installer.nodecheck import NODE_SUMS, NODE_TOOL
from mirror.fleet import k8s as fleet_k8s
from plumbing.errors import ExitCode
from tests import bundle_tamper as tamper
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import dpkg_versions
from tests.test_node_rotation import VERIFY_NODE_TOOL, key_file, marker_tool_signed, signature

SHA = "a" * 64


def refused_bundles(
    bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> Dict[str, Path]:
    """Bundles whose node tool writes ``tmp_path/MARKER`` if run: by an unknown key, and SHA-1 by the operator key."""
    marker = tmp_path / "MARKER"
    sums = tamper.resigned_node_check(bundle, operator_key, {NODE_TOOL: tamper.marker_zipapp(marker)})[
        NODE_SUMS
    ]
    return {
        "by-another-key": marker_tool_signed(bundle, tmp_path / "other.tar.zst", marker, by=other_key),
        "sha1": marker_tool_signed(
            bundle, tmp_path / "sha1.tar.zst", marker, signature(operator_key, sums, "SHA1"), by=operator_key
        ),
    }


# -- the Ansible role's controller check (files/verify-node-tool.sh) ---------------------------------------


def _verify(
    bundle: Path, key: Path, dest: Path, fingerprint: Optional[str] = None
) -> subprocess.CompletedProcess[str]:
    argv = [
        "sh",
        str(VERIFY_NODE_TOOL),
        str(bundle),
        str(key),
        str(dest),
        *([fingerprint] if fingerprint else []),
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("holds", ["old", "new"])
def test_the_controller_check_accepts_a_dual_signed_bundle_with_either_key(
    holds: str, dual_bundle: Path, rotation: tuple[TestKey, TestKey], tmp_path: Path
) -> None:
    key = dict(zip(("old", "new"), rotation))[holds]
    done = _verify(dual_bundle, key.public, tmp_path / "one")
    assert done.returncode == 0, done.stderr
    tool = tamper.node_files(dual_bundle)[NODE_TOOL]
    assert (tmp_path / "one" / NODE_TOOL).read_bytes() == tool
    both = key_file(tmp_path / "both.asc", *rotation)
    pinned = _verify(dual_bundle, both, tmp_path / "pinned", key.fingerprint)
    assert pinned.returncode == 0 and (tmp_path / "pinned" / NODE_TOOL).read_bytes() == tool, pinned.stderr


@pytest.mark.parametrize("attack", ["by-another-key", "sha1", "another-key-of-the-file"])
def test_the_controller_check_refuses_an_unknown_signer_sha1_and_another_key_than_the_pinned(
    attack: str, deb_bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    bad = refused_bundles(deb_bundle, operator_key, other_key, tmp_path)
    key, pin = operator_key.public, None
    if attack == "another-key-of-the-file":  # other_key is in the file, but the pin names the operator's
        key, pin = key_file(tmp_path / "both.asc", operator_key, other_key), operator_key.fingerprint
    bundle = bad["sha1" if attack == "sha1" else "by-another-key"]
    done = _verify(bundle, key, tmp_path / "dest", pin)
    assert done.returncode == 3, done.stderr
    named = f"{pin} of {key}" if pin else str(key)
    assert (
        f"is not signed by the operator key {named} (NODE-SHA256SUMS.asc); refusing to run it" in done.stderr
    )
    assert not (tmp_path / "dest" / NODE_TOOL).exists()
    if pin:  # control: unpinned, the other key of the file counts
        assert _verify(bundle, key, tmp_path / "dest").returncode == 0


def test_the_controller_check_refuses_a_fingerprint_that_is_not_forty_hex_digits(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    done = _verify(deb_bundle, operator_key.public, tmp_path / "dest", operator_key.fingerprint[-16:])
    assert done.returncode == ExitCode.USAGE and "is not a full 40-hex-digit fingerprint" in done.stderr
    assert not (tmp_path / "dest").exists()


# -- the DaemonSet's program (k8s-node.py) ----------------------------------------------------------------


def _pod_program() -> Any:
    spec = importlib.util.spec_from_file_location(
        "k8s_node", Path(fleet_k8s.__file__).parent / "data/k8s-node.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pod_program_carries_the_node_commands_decision() -> None:
    program = _pod_program()
    for name in ("GPGV_OPTIONS", "REFUSING_STATUS", "GOOD_SIGNATURE", "ANY_KEY"):
        assert getattr(program, name) == getattr(nodecheck, name), name


@pytest.mark.parametrize("holds", ["old", "new"])
def test_the_pod_program_accepts_a_dual_signed_bundle_with_either_key(
    holds: str,
    dual_bundle: Path,
    rotation: tuple[TestKey, TestKey],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = dict(zip(("old", "new"), rotation))[holds]
    program = _pod_program()
    dest = tmp_path / "cache" / NODE_TOOL
    dest.parent.mkdir()
    program.node_tool(dual_bundle, dest, key.public)
    assert dest.read_bytes() == tamper.node_files(dual_bundle)[NODE_TOOL]
    monkeypatch.setenv("GPU_AIRGAP_FINGERPRINT", key.fingerprint)
    program.node_tool(dual_bundle, dest, key_file(tmp_path / "both.asc", *rotation))
    assert dest.read_bytes() == tamper.node_files(dual_bundle)[NODE_TOOL]
    no_gpgv = tmp_path / "bin"  # a node with GnuPG but no gpgv: gpg --verify, the same decision
    no_gpgv.mkdir()
    for tool in ("tar", "zstd", "gpg"):
        (no_gpgv / tool).symlink_to(f"/usr/bin/{tool}")
    monkeypatch.setenv("PATH", str(no_gpgv))
    program.node_tool(dual_bundle, dest, key_file(tmp_path / "both.asc", *rotation))
    assert dest.read_bytes() == tamper.node_files(dual_bundle)[NODE_TOOL]


@pytest.mark.parametrize("attack", ["by-another-key", "sha1", "another-key-of-the-file"])
def test_the_pod_program_refuses_an_unknown_signer_sha1_and_another_key_than_the_pinned(
    attack: str,
    deb_bundle: Path,
    operator_key: TestKey,
    other_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = refused_bundles(deb_bundle, operator_key, other_key, tmp_path)
    key = operator_key.public
    if attack == "another-key-of-the-file":
        key = key_file(tmp_path / "both.asc", operator_key, other_key)
        monkeypatch.setenv("GPU_AIRGAP_FINGERPRINT", operator_key.fingerprint)
    program = _pod_program()
    dest = tmp_path / "cache" / NODE_TOOL
    dest.parent.mkdir()
    with pytest.raises(SystemExit) as refused:
        program.node_tool(bad["sha1" if attack == "sha1" else "by-another-key"], dest, key)
    assert refused.value.code == ExitCode.VERIFICATION_FAILED and not dest.exists()
    named = f"{operator_key.fingerprint} of {key}" if attack == "another-key-of-the-file" else str(key)
    assert f"is not signed by the operator key {named} (NODE-SHA256SUMS.asc)" in capsys.readouterr().err


def test_the_pod_program_gives_the_installer_the_pinned_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    program = _pod_program()
    assert "--fingerprint" not in program.install_argv(Path("tool"), Path("bundle"))
    monkeypatch.setenv("GPU_AIRGAP_FINGERPRINT", "B" * 40)
    argv = program.install_argv(Path("tool"), Path("bundle"))
    assert argv[argv.index("--fingerprint") + 1] == "B" * 40


# -- fleet k8s --fingerprint ------------------------------------------------------------------------------


def _k8s(key: Path, *args: str) -> Any:
    return run_cli(
        "fleet", "k8s", "--bundle-url", "http://x/b", "--bundle-sha256", SHA, "--keyring", str(key), *args
    )


def _pod_env(stdout: str) -> Dict[str, str]:
    docs: List[Dict[str, Any]] = [d for d in yaml.safe_load_all(stdout) if d]
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def test_fleet_k8s_pins_the_pods_to_the_fingerprint_and_refuses_two_keys_without_one(
    operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    both = key_file(tmp_path / "both.asc", operator_key, other_key)
    unpinned = _k8s(both)
    assert unpinned.exit_code == ExitCode.USAGE and "holds 2 keys" in unpinned.stderr, unpinned.stderr
    spaced = " ".join(other_key.fingerprint[i : i + 4] for i in range(0, 40, 4)).lower()
    pinned = _k8s(both, "--fingerprint", spaced)
    assert pinned.exit_code == 0, pinned.stderr
    assert _pod_env(pinned.stdout)["GPU_AIRGAP_FINGERPRINT"] == other_key.fingerprint
    one = _k8s(operator_key.public)
    assert one.exit_code == 0 and "GPU_AIRGAP_FINGERPRINT" not in _pod_env(one.stdout), one.stderr
    short = _k8s(operator_key.public, "--fingerprint", operator_key.fingerprint[-16:])
    assert short.exit_code == ExitCode.USAGE and "is not a full 40-hex-digit fingerprint" in short.stderr
    absent = _k8s(operator_key.public, "--fingerprint", other_key.fingerprint)
    assert absent.exit_code == ExitCode.USAGE and "does not hold the key --fingerprint" in absent.stderr


# -- the Ansible role end to end: gpu_airgap_fingerprint on a key file of both keys ------------------------


@pytest.mark.slow
def test_the_role_installs_a_dual_signed_bundle_with_a_key_file_of_both_keys_pinned_to_one(
    dual_bundle: Path, rotation: tuple[TestKey, TestKey], tmp_path: Path
) -> None:
    from tests.test_fleet_ansible import Fleet

    old, new = rotation
    fleet = Fleet(tmp_path / "fleet", dual_bundle, key_file(tmp_path / "both.asc", old, new))
    unpinned = fleet.play("site.yml", "--limit", "node1")
    assert unpinned.returncode != 0
    failed = unpinned.task("node1", "Install the toolkit from the bundle")
    assert failed["status"] == "failed" and "holds 2 keys" in failed["result"]["msg"], failed
    done = fleet.play("site.yml", "--limit", "node1", "-e", f"gpu_airgap_fingerprint={new.fingerprint}")
    assert done.returncode == 0, json.dumps(done.results)[-2000:]
    assert dpkg_versions(fleet.roots["node1"]), "nothing installed"
    state = json.loads((fleet.roots["node1"] / "var/lib/gpu-airgap/state.json").read_text())
    assert state["signer"] == new.fingerprint
    # The pin reaches the controller's check: a node tool only the old key of the file signed is refused.
    marker = tmp_path / "MARKER"
    by_old = marker_tool_signed(dual_bundle, tmp_path / "by-old.tar.zst", marker, by=old)
    refused = fleet.play(
        "site.yml", "--limit", "node2", "-e", f"gpu_airgap_fingerprint={new.fingerprint}", bundle=by_old
    )
    check = refused.task(
        "node2", "Take the node tool out of the bundle and check it against the operator key (controller)"
    )
    assert (
        check["status"] == "failed"
        and f"is not signed by the operator key {new.fingerprint} of" in (check["result"]["stderr"])
    ), check
    assert not marker.exists() and not dpkg_versions(fleet.roots["node2"])
