"""Issue 14 item 5: the Ansible role's handler path against a node booted with systemd.

Real ``ansible-playbook`` (ansible-core) runs ``site.yml`` over its ssh connection into the booted
node of :mod:`tests.live.booted`, as root with a throwaway key. The node has no network the host
can reach, so each ssh connection is the node's own ``sshd -i`` behind a ``ProxyCommand`` (real
ssh on both ends, no port opened anywhere). ssh connection sharing is off, so no ssh master
outlives the playbook.

The role installs with ``--no-restart`` and its handler runs the node tool's ``restart``: first
on a node whose containerd refuses to start with NVIDIA's runtime (the site gate of
:func:`tests.live.booted.gate_containerd`), where the handler fails the host and containerd runs
again on its previous config; then, the gate gone, the same playbook converges and the restarted
containerd serves the ``nvidia`` handler.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ansible_play import Play, run_playbook
from tests.gpgkeys import TestKey
from tests.live import booted

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "deploy" / "ansible" / "site.yml"
HANDLER = "Restart the changed container engines"
INSTALL = "Install the toolkit from the bundle"
HOST = "gpu-node"


@pytest.fixture
def node(booted_tarball: Path, tmp_path: Path) -> Iterator[booted.BootedNode]:
    with booted.BootedNode(tmp_path / "node", booted_tarball) as running:
        yield running


def _ansible(tmp: Path, node: booted.BootedNode, bundle: Path, keyring: Path) -> Play:
    """``ansible-playbook site.yml`` against the node, hermetic (config, HOME, temp dirs under ``tmp``)."""
    key = tmp / "id_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        node.authorize(key.with_suffix(".pub"))
    ssh_args = (
        f'-o ProxyCommand="{node.ssh_proxy()}" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'
    )
    (tmp / "inventory.ini").write_text(
        "[gpu_nodes]\n"
        f"gpu-node ansible_host=127.0.0.1 ansible_user=root ansible_ssh_private_key_file={key}\n"
        "[gpu_nodes:vars]\n"
        "ansible_connection=ssh\n"
        f"ansible_ssh_common_args='{ssh_args}'\n"
        "ansible_become=false\n"
        "ansible_python_interpreter=/usr/bin/python3\n"
        "gpu_airgap_runtime=containerd\n"
        "gpu_airgap_cdi=off\n"
    )
    args = [
        "-i",
        str(tmp / "inventory.ini"),
        str(PLAYBOOK),
        "-e",
        f"gpu_airgap_bundle={bundle}",
        "-e",
        f"gpu_airgap_keyring={keyring}",
    ]
    no_ssh_master_left = {"ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o ControlPersist=no"}
    return run_playbook(tmp, args, env=no_ssh_master_left, timeout=600)


def test_the_roles_restart_handler_rolls_back_a_containerd_that_stays_down_and_restarts_it_once_it_can(
    node: booted.BootedNode, tmp_path: Path, deb_bundle: Path, operator_key: TestKey, cri: None
) -> None:
    config = node.path("/etc/containerd/config.toml")
    original = config.read_bytes()
    booted.gate_containerd(node)
    first = _ansible(tmp_path, node, deb_bundle, operator_key.public)
    assert first.returncode != 0, first.output[-4000:]
    assert first.task(HOST, INSTALL)["status"] == "ok" and first.task(HOST, INSTALL)["result"][
        "engines_changed"
    ] == ["containerd"]
    handler = first.task(HOST, HANDLER)
    assert handler["status"] == "failed" and handler["result"]["rc"] == 11, handler
    assert "containerd did not come back" in handler["result"]["msg"]
    assert first.stats[HOST]["failures"] == 1
    assert config.read_bytes() == original
    assert node.active_state("containerd") == "active"
    assert "nvidia" not in booted.runtime_handlers(node, tmp_path / "cri-logs")

    booted.ungate_containerd(node)
    before = node.main_pid("containerd")
    second = _ansible(tmp_path, node, deb_bundle, operator_key.public)
    assert second.returncode == 0, second.output[-4000:]
    assert second.task(HOST, HANDLER)["status"] == "ok"
    assert second.task(HOST, HANDLER)["result"]["engines_changed"] == ["containerd"]
    assert node.main_pid("containerd") not in (0, before)
    assert "nvidia" in booted.runtime_handlers(node, tmp_path / "cri-logs")
    assert b"nvidia-container-runtime" in config.read_bytes()
