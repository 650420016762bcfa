#!/usr/bin/python
"""Ansible module: run the gpu-airgap node tool (``gpu-airgap-node.pyz``) and report what it changed.

The node tool does the work and already knows whether anything changed: ``install --json`` says
``changed`` (and, with ``--dry-run``, whether a real run would change anything, plus the
configuration diff); ``configure ENGINE --json`` says ``already_configured``; ``status --json``
says whether gpu-airgap installed anything; the configure journal says whether ``configure ENGINE``
changed anything that ``configure revert`` would restore. This module only maps that onto Ansible's
``changed``, ``--check`` (the tool's ``--dry-run``) and ``--diff``, so a second run reports
``changed=0``. It needs nothing but ansible-core on the controller and python3 >= 3.9 on the node.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: gpu_airgap_node
short_description: Install, configure or uninstall the NVIDIA Container Toolkit with the gpu-airgap node tool
description:
  - Runs the gpu-airgap node tool (gpu-airgap-node.pyz) on the node and maps its own JSON result onto
    Ansible's changed, check mode (the tool's --dry-run) and diff mode (the engine configuration diff),
    so a second run reports changed=0.
  - The node tool must already be on the node and checked against the operator key; the role
    airgap.gpu_airgap.gpu_airgap does that on the controller. The installer verifies the bundle
    against the operator key before it changes anything.
version_added: "1.0.0"
author:
  - gpu-airgap maintainers
requirements:
  - python3 >= 3.9 on the node
options:
  state:
    description:
      - present installs from a bundle; configured registers the runtime only (packages came from the
        mirror); restarted restarts the engines an install left pending, putting back the configuration
        of any that stays down; absent uninstalls what gpu-airgap installed; unconfigured restores what
        configured changed in the engine's configuration (configure revert).
    type: str
    choices: [present, configured, restarted, absent, unconfigured]
    default: present
  zipapp:
    description: gpu-airgap-node.pyz on the node.
    type: path
    required: true
  python:
    description: The node's python3 (>= 3.9).
    type: str
    default: python3
  bundle:
    description:
      - state=present - the signed bundle, a file on the node or an oci://HOST/REPO@sha256:DIGEST reference
        the node tool pulls by digest from the registry.
    type: str
  keyring:
    description: state=present - the operator's public key on the node.
    type: path
  fingerprint:
    description:
      - state=present - the full 40-hex-digit fingerprint of the one key of I(keyring) to trust (install's
        --fingerprint); required when that file holds several keys.
    type: str
  bundle_pending:
    description: The bundle or tool is not on the node yet (a check-mode run did not copy or fetch it).
    type: bool
    default: false
  root:
    description: The node's root (a scratch root in tests).
    type: path
    default: /
  runtime:
    description:
      - The engine to register the runtime with (configured needs one engine; lxc is configured per
        container, not here).
    type: str
    choices: [auto, containerd, docker, crio, podman, lxc, none]
    default: auto
  runtime_name:
    description: The runtime's name in the engine's configuration.
    type: str
    default: nvidia
  set_as_default:
    description: Make the runtime the engine's default.
    type: bool
    default: false
  cdi:
    description: CDI - auto, on or off (configured - on enables CDI in the engine; podman - off writes the OCI hook).
    type: str
    choices: [auto, "on", "off"]
    default: auto
  hold:
    description: Hold the packages at this release; a later bundle moves held nodes on and keeps them held.
    type: bool
    default: false
  force:
    description: Uninstall or revert even when recorded files were edited since.
    type: bool
    default: false
  engines:
    description: state=restarted - these engines (after state=configured) instead of the install's pending ones.
    type: list
    elements: str
    default: []
  distro:
    description:
      - Which containerd the kubelet uses (install's, configure's and restart's --distro); auto detects it on the node.
    type: str
    choices: [auto, containerd, k3s, rke2, microk8s, k0s]
    default: auto
  take_over:
    description:
      - Take the runtime configuration over from the NVIDIA GPU Operator (install's --force).
    type: bool
    default: false
  plain_http:
    description: An oci:// bundle - speak plain http to the registry (a loopback or test registry).
    type: bool
    default: false
  ca_file:
    description: An oci:// bundle - PEM file on the node of the CA that signed the registry's certificate.
    type: path
  docker_config:
    description: An oci:// bundle - a directory on the node whose config.json holds the registry credentials (DOCKER_CONFIG).
    type: path
"""

EXAMPLES = r"""
- name: Install the toolkit from the bundle copied to the node
  airgap.gpu_airgap.gpu_airgap_node:
    state: present
    zipapp: /var/cache/gpu-airgap/fleet/gpu-airgap-node.pyz
    bundle: /var/cache/gpu-airgap/fleet/gpu-airgap-bundle
    keyring: /var/cache/gpu-airgap/fleet/operator.asc
    runtime: containerd

- name: Install straight from the registry, by digest
  airgap.gpu_airgap.gpu_airgap_node:
    zipapp: /var/cache/gpu-airgap/fleet/gpu-airgap-node.pyz
    bundle: oci://registry.internal:5000/gpu-airgap/nvct@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    keyring: /var/cache/gpu-airgap/fleet/operator.asc
"""

RETURN = r"""
result:
  description: The node tool's JSON object.
  returned: when the node tool ran
  type: dict
engines_changed:
  description: Engines waiting for a restart (the role's restart handler restarts these).
  returned: always
  type: list
  elements: str
files:
  description: state=unconfigured - the files configure revert restores (or would, under check mode).
  returned: state=unconfigured
  type: list
  elements: str
"""


#: a bundle the node tool pulls from a registry itself (``install oci://…``), checking every blob's digest
OCI = "oci://"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {
                "choices": ["present", "configured", "restarted", "absent", "unconfigured"],
                "default": "present",
            },
            "zipapp": {"type": "path", "required": True},
            "python": {"type": "str", "default": "python3"},
            "bundle": {"type": "str"},
            "keyring": {"type": "path"},
            "fingerprint": {"type": "str"},
            "bundle_pending": {"type": "bool", "default": False},
            "root": {"type": "path", "default": "/"},
            "runtime": {
                "choices": ["auto", "containerd", "docker", "crio", "podman", "lxc", "none"],
                "default": "auto",
            },
            "runtime_name": {"type": "str", "default": "nvidia"},
            "set_as_default": {"type": "bool", "default": False},
            "cdi": {"choices": ["auto", "on", "off"], "default": "auto"},
            "hold": {"type": "bool", "default": False},
            "force": {"type": "bool", "default": False},
            "engines": {"type": "list", "elements": "str", "default": []},
            "distro": {
                "choices": ["auto", "containerd", "k3s", "rke2", "microk8s", "k0s"],
                "default": "auto",
            },
            "take_over": {"type": "bool", "default": False},
            "plain_http": {"type": "bool", "default": False},
            "ca_file": {"type": "path"},
            "docker_config": {"type": "path"},
        },
        required_if=[("state", "present", ("bundle", "keyring"))],
        supports_check_mode=True,
    )
    state = module.params["state"]
    if state == "present":
        _present(module)
    elif state == "configured":
        _configured(module)
    elif state == "restarted":
        _restarted(module)
    elif state == "unconfigured":
        _unconfigured(module)
    else:
        _absent(module)


def _run(module: AnsibleModule, *args: str, ok_codes: tuple = (0,)) -> subprocess.CompletedProcess:
    """Run ``python3 -I -S gpu-airgap-node.pyz ARGS...``; an exit status outside ``ok_codes`` fails the task."""
    p = module.params
    argv = [p["python"], "-I", "-S", p["zipapp"], *args]
    # an oci:// bundle: the registry credentials the role placed on the node (the tool reads $DOCKER_CONFIG/config.json)
    env = {**os.environ, "DOCKER_CONFIG": p["docker_config"]} if p["docker_config"] else None
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if proc.returncode not in ok_codes:
        # The tool's last stderr line is its one-sentence error ("gpu-airgap: error: ...").
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        module.fail_json(
            msg=lines[-1] if lines else f"{' '.join(argv)} exited with status {proc.returncode}",
            rc=proc.returncode,
            cmd=argv,
            stdout=proc.stdout,
            stderr=proc.stderr,
        )
    return proc


def _tool(module: AnsibleModule, *args: str, ok_codes: tuple = (0,)) -> dict:
    """Run ``python3 -I -S gpu-airgap-node.pyz ARGS... --json`` and return its JSON object (fail the task otherwise)."""
    proc = _run(module, *args, "--json", ok_codes=ok_codes)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        module.fail_json(
            msg="the node tool did not print a JSON object",
            cmd=proc.args,
            stdout=proc.stdout,
            stderr=proc.stderr,
        )
        raise  # fail_json exits; this keeps linters sure the function returns


def _install_args(p: dict) -> list:
    args = [
        "install",
        p["bundle"],
        "--keyring",
        p["keyring"],
        "--root",
        p["root"],
        "--runtime",
        p["runtime"],
        "--runtime-name",
        p["runtime_name"],
        "--cdi",
        p["cdi"],
        "--no-restart",
    ]
    if p["fingerprint"]:
        args += ["--fingerprint", p["fingerprint"]]
    if p["set_as_default"]:
        args.append("--set-as-default")
    if p["hold"]:  # the play names the bundle: it moves held nodes on and keeps them held
        args += ["--hold", "--allow-held"]
    if p["bundle"].startswith(OCI):
        args += ["--plain-http"] if p["plain_http"] else []
        args += ["--ca-file", p["ca_file"]] if p["ca_file"] else []
    return args + _distro_args(p)


def _distro_args(p: dict) -> list:
    """``--distro`` (the same detection as the node tool's, overridden the same way) and ``--force`` to take over."""
    args = ["--distro", p["distro"]] if p["distro"] != "auto" else []
    return args + (["--force"] if p["take_over"] else [])


def _diff(text: str) -> dict:
    return {"prepared": text} if text else {}


def _present(module: AnsibleModule) -> None:
    p = module.params
    if module.check_mode and p["bundle_pending"]:
        module.exit_json(
            changed=True, msg="would copy the bundle to the node and install it", engines_changed=[]
        )
    local = [p["keyring"], p["zipapp"]] + ([] if p["bundle"].startswith(OCI) else [p["bundle"]])
    for path in local:
        if not Path(path).is_file():
            module.fail_json(msg=f"{path} is not on the node; copy it there first")
    args = _install_args(p)
    planned = _tool(module, *args, "--dry-run") if module.check_mode or module._diff else None
    if module.check_mode:
        engines = planned["restart_pending"]
        module.exit_json(
            changed=planned["changed"] or bool(engines),
            result=planned,
            engines_changed=engines,
            diff=_diff(planned["diff"]),
        )
    result = _tool(module, *args)
    # The installer keeps engines it did not restart pending until `restart` ran, so a handler that
    # never ran (a failed batch, a lost connection) is notified again by the next run.
    engines = result["restart_pending"]
    diff = _diff(planned["diff"]) if planned is not None and result["changed"] else {}
    module.exit_json(
        changed=result["changed"] or bool(engines), result=result, engines_changed=engines, diff=diff
    )


def _restarted(module: AnsibleModule) -> None:
    p = module.params
    if module.check_mode:
        pending = (
            p["engines"] or _tool(module, "status", "--root", p["root"], ok_codes=(0, 9))["restart_pending"]
        )
        module.exit_json(changed=bool(pending), engines_changed=pending)
    distro = ["--distro", p["distro"]] if p["distro"] != "auto" else []
    result = _tool(
        module,
        "restart",
        "--root",
        p["root"],
        *distro,
        *(arg for e in p["engines"] for arg in ("--runtime", e)),
    )
    module.exit_json(changed=result["changed"], result=result, engines_changed=list(result["engines"]))


#: the engines that run as a service (the restart handler's); podman reads its files per container
SERVICE_ENGINES = ("containerd", "docker", "crio")


def _configure_args(p: dict) -> list:
    if p["runtime"] == "podman":  # no runtime entry to name: CDI (the spec), or the hook with cdi=off
        return ["configure", "podman", "--root", p["root"], *(["--hook"] if p["cdi"] == "off" else [])]
    args = ["configure", p["runtime"], "--root", p["root"], "--runtime-name", p["runtime_name"]]
    if p["set_as_default"]:
        args.append("--set-as-default")
    args += ["--cdi", p["cdi"]]  # the same auto | on | off as install
    if p["runtime"] == "containerd":
        args += _distro_args(p)
    return args


def _configured(module: AnsibleModule) -> None:
    p = module.params
    if p["runtime"] in ("auto", "none", "lxc"):
        module.fail_json(
            msg="state=configured needs one engine in runtime: containerd, docker, crio or podman (LXC is configured per container: gpu-airgap configure lxc --container NAME)"
        )
    args = _configure_args(p)
    restart = [p["runtime"]] if p["runtime"] in SERVICE_ENGINES else []
    planned = _tool(module, *args, "--dry-run") if module.check_mode or module._diff else None
    if module.check_mode:
        changed = _needs_change(planned, p["runtime_name"])
        module.exit_json(
            changed=changed,
            result=planned,
            engines_changed=restart if changed else [],
            diff=_diff(planned["diff"]),
        )
    result = _tool(module, *args)
    changed = _needs_change(result, p["runtime_name"])
    diff = _diff(planned["diff"]) if planned is not None and changed else {}
    module.exit_json(changed=changed, result=result, engines_changed=restart if changed else [], diff=diff)


def _needs_change(result: dict, runtime_name: str) -> bool:
    """A file changed, or k3s/RKE2 still has to restart to register the runtime itself (it writes no file)."""
    facts = {
        key.lower(): value for key, value in (result.get("facts") or {}).items()
    }  # an older tool's are UPPER_CASE
    return not result["already_configured"] or (
        facts.get("distro") in ("k3s", "rke2") and facts.get("runtime") != runtime_name
    )


def _absent(module: AnsibleModule) -> None:
    p = module.params
    status = _tool(module, "status", "--root", p["root"], ok_codes=(0, 9))  # 9: drift, still a report
    if not status["installed_by_gpu_airgap"]:
        module.exit_json(
            changed=False,
            msg="gpu-airgap has no install recorded on this node",
            result=status,
            engines_changed=[],
        )
    if module.check_mode:
        module.exit_json(changed=True, msg="would uninstall", result=status, engines_changed=[])
    args = ["uninstall", "--root", p["root"]] + (["--force"] if p["force"] else [])
    # uninstall restarts the engines it restored itself (on the live root), checking they come back.
    module.exit_json(changed=True, result=_tool(module, *args), engines_changed=[])


#: configure's journal under the node root (configure/changes.py ``STATE_DIR``): every write
#: ``configure ENGINE`` made, oldest first, as ``{"entries": [{"engine": ..., "path": ...}, ...]}``.
JOURNAL = "var/lib/gpu-airgap/configure/journal.json"


def _journaled(module: AnsibleModule, engine: str) -> list:
    """The files ``configure ENGINE`` changed under the root and has not reverted yet."""
    path = Path(module.params["root"]) / JOURNAL
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["entries"]
        return sorted({str(e["path"]) for e in entries if e["engine"] == engine})
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError):
        module.fail_json(msg=f"{path}: the configure journal is corrupt")
        raise  # fail_json exits; this keeps linters sure the function returns


def _unconfigured(module: AnsibleModule) -> None:
    """Restore what ``configure ENGINE`` changed (the mirror path), byte for byte; a no-op when nothing is recorded.

    ``configure revert`` has no ``--json``: whether it would change anything is read from the journal
    it restores from, so --check and a second run are both honest.
    """
    p = module.params
    engine = p["runtime"]
    if engine in ("auto", "none"):
        module.fail_json(
            msg="state=unconfigured needs one engine in runtime: containerd, docker, crio, podman or lxc"
        )
    files = _journaled(module, engine)
    if not files:
        module.exit_json(
            changed=False,
            msg=f"gpu-airgap has not changed the {engine} configuration here",
            engines_changed=[],
        )
    if module.check_mode:
        module.exit_json(
            changed=True, msg=f"would restore {', '.join(files)}", files=files, engines_changed=[engine]
        )
    proc = _run(
        module,
        "configure",
        "revert",
        "--root",
        p["root"],
        "--runtime",
        engine,
        *(["--force"] if p["force"] else []),
    )
    # the engine is restarted by the role's handler (live root only), as after configure
    module.exit_json(
        changed=True,
        files=files,
        restored=proc.stdout.splitlines(),
        engines_changed=[engine] if engine in SERVICE_ENGINES else [],
    )


if __name__ == "__main__":
    main()
