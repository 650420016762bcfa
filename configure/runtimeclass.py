"""The Kubernetes RuntimeClass that sends pods to the NVIDIA runtime, and its record for ``verify``.

A RuntimeClass only works when its ``handler`` equals a runtime the CRI engine registers
(containerd ``...runtimes.<handler>``, CRI-O ``crio.runtime.runtimes.<handler>``); otherwise pods
fail with ``RuntimeHandler "nvidia" not supported``. So besides the manifest we record
``{"name", "handler", "output"}`` in ``<root>/var/lib/gpu-airgap/configure/runtimeclass.json``,
which ``configure verify`` reads to check the handler against the registered runtimes.

``--output`` is a node path like every other path of the configure group: an absolute path is
mapped under ``--root``; on the running system a relative one is taken relative to the current
directory and recorded as an absolute path. Under another root a relative one is refused: it
would land outside the root, where gpu-airgap neither writes nor records. Without ``--output`` the manifest goes to stdout and ``output`` is null.
Both files go through the journal (engine ``runtimeclass``), so ``revert`` removes them again.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, Optional

import yaml

from configure.changes import STATE_DIR, FileChange, read_optional
from configure.distros import detection
from configure.engine import ConfigPlan
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import is_live_root, rooted
from plumbing.output_target import output_is_stream

ENGINE = "runtimeclass"
RECORD = STATE_DIR + "/runtimeclass.json"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def manifest(name: str = "nvidia", handler: str = "nvidia") -> Dict[str, Any]:
    """The RuntimeClass object.

    :raises UsageError: when ``name`` is not a DNS subdomain or ``handler`` not a DNS label
        (the API server would reject the object).
    """
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise UsageError(f"RuntimeClass name {name!r} must be a lowercase DNS subdomain such as nvidia")
    if len(handler) > 63 or not _DNS_LABEL.match(handler):
        raise UsageError(f"handler {handler!r} must be a lowercase DNS label such as nvidia")
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": handler,
    }


#: the RuntimeClasses k3s deploys itself (its packaged manifests/runtimes.yaml): name -> handler
K3S_RUNTIMECLASSES = {"nvidia": "nvidia", "nvidia-experimental": "nvidia-experimental"}


def k3s_clash(name: str, handler: str) -> Optional[str]:
    """What to say when k3s deploys a RuntimeClass called ``name`` itself; None when it does not.

    The same object (name and handler) is already there: we emit none and say so. Another handler
    under k3s's name would be replaced by k3s's own again: refused.

    :raises UsageError: for k3s's name with another handler.
    """
    ours = K3S_RUNTIMECLASSES.get(name)
    if ours is None:
        return None
    if ours != handler:
        raise UsageError(
            f"k3s deploys its own RuntimeClass {name} (handler {ours}) and puts it back over another one of that name; "
            "choose another RuntimeClass name"
        )
    return f"k3s already deploys RuntimeClass {name} with handler {handler}; no RuntimeClass emitted (it would clash)"


def render_manifest(name: str = "nvidia", handler: str = "nvidia") -> str:
    """The RuntimeClass as YAML."""
    return yaml.safe_dump(manifest(name, handler), sort_keys=False, default_flow_style=False)


def read_record(root: Path) -> Optional[Dict[str, Any]]:
    """The recorded ``{"name", "handler", "output"}`` under ``root``, or None when none was written."""
    path = rooted(root, RECORD)
    raw = read_optional(path)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigFormatError(
            path, "the RuntimeClass record is not valid JSON; run configure runtimeclass again"
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("handler"), str):
        raise ConfigFormatError(
            path, "the RuntimeClass record has no handler; run configure runtimeclass again"
        )
    return data


def plan_runtimeclass(
    root: Path, name: str = "nvidia", handler: str = "nvidia", output: Optional[str] = None
) -> ConfigPlan:
    """Plan the manifest (when ``output`` is set and k3s does not deploy it already) and the record; never writes.

    Facts: ``RUNTIMECLASS``, ``HANDLER``, and ``EMIT`` (``false`` when k3s already deploys it).
    """
    text = render_manifest(name, handler)
    plan = ConfigPlan(engine=ENGINE)
    clash = k3s_clash(name, handler) if detection.candidates(root)["k3s"].evidence else None
    if clash is not None:
        plan.warnings.append(clash)
    plan.facts["EMIT"] = str(clash is None).lower()
    node_output: Optional[str] = None
    if output is not None and not output.startswith("/") and not is_live_root(root):
        raise UsageError(
            f"--output {output!r} is relative, so it would land outside --root {root}: "
            "give the manifest's path on the node, such as /etc/kubernetes/runtimeclass.yaml"
        )
    if output is not None and clash is None:
        node_output = output if output.startswith("/") else os.path.abspath(output)
        path = rooted(root, output) if output.startswith("/") else Path(node_output)
        if output_is_stream(path):  # a journaled write would replace the device or pipe with a file
            raise UsageError(
                f"--output {output} is a device or a pipe; leave --output out to print the manifest on stdout"
            )
        plan.changes.append(FileChange(path, read_optional(path), text.encode(), mode=0o644))
    record = rooted(root, RECORD)
    data = {"name": name, "handler": handler, "output": node_output}
    old = read_optional(record)
    new = (json.dumps(data, indent=2) + "\n").encode()
    plan.changes.append(FileChange(record, old, new, mode=0o644))
    plan.facts.update({"RUNTIMECLASS": name, "HANDLER": handler})
    plan.notes.update(data)
    return plan
