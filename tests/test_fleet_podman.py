"""The Ansible module's mirror path with podman: ``configure podman`` through the real ``ansible``, no engine to restart.

One ad-hoc ``ansible localhost -m gpu_airgap_node`` call per step (``--check``, configure, again,
unconfigure) on a scratch root, with the node tool built as the bundle ships it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from mirror.bundle.zipapp import build_zipapp

pytestmark = pytest.mark.slow

LIBRARY = (
    Path(__file__).resolve().parents[1]
    / "deploy/ansible/collections/ansible_collections/airgap/gpu_airgap/plugins/modules"
)


def _module(tmp: Path, *args: str) -> Dict[str, Any]:
    """Run the module once on localhost; return its result (``ansible -o``: ``host | STATUS => {...}``)."""
    home = tmp / "home"
    env = {
        **os.environ,
        "HOME": str(home),
        "ANSIBLE_HOME": str(home / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(home / "lt"),
        "ANSIBLE_REMOTE_TEMP": str(home / "rt"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LIBRARY": str(LIBRARY),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
    }
    argv = [
        str(Path(sys.executable).with_name("ansible")),
        "localhost",
        "-c",
        "local",
        "-o",
        "-m",
        "gpu_airgap_node",
        *args,
    ]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    line = next((x for x in proc.stdout.splitlines() if "=>" in x), "")
    assert line, proc.stdout + proc.stderr
    head, _, body = line.partition("=>")
    return dict(json.loads(body), status=head.partition("|")[2].strip())


def test_the_mirror_path_configures_podman_and_asks_no_restart(tmp_path: Path) -> None:
    pyz = tmp_path / "gpu-airgap-node.pyz"
    pyz.write_bytes(build_zipapp(epoch=0))
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    hook = root / "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"
    params = f"zipapp={pyz} python={sys.executable} root={root} runtime=podman cdi=off"

    checked = _module(tmp_path, "--check", "-a", f"state=configured {params}")
    assert checked["changed"] is True and checked["engines_changed"] == [] and not hook.exists(), checked
    done = _module(tmp_path, "-a", f"state=configured {params}")
    assert done["changed"] is True and done["engines_changed"] == [] and hook.is_file(), done
    assert done["result"]["facts"]["mode"] == "hook"
    again = _module(tmp_path, "-a", f"state=configured {params}")
    assert again["changed"] is False, again
    undone = _module(tmp_path, "-a", f"state=unconfigured {params}")
    assert undone["changed"] is True and undone["engines_changed"] == [] and not hook.exists(), undone

    refused = _module(tmp_path, "-a", f"state=configured {params.replace('podman', 'lxc')}")
    assert refused["status"] == "FAILED!" and "LXC is configured per container" in refused["msg"], refused
