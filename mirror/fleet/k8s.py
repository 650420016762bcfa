"""``gpu-airgap fleet k8s``: the manifests that install the toolkit on every GPU node of a cluster.

What NVIDIA's GPU Operator does for its toolkit container, without the Operator: a privileged
DaemonSet on the GPU nodes (node selector and tolerations) mounts the host's / at ``/host`` and runs
the bundle's node installer with ``--no-restart``; the container then restarts the changed engine on
the host and marks itself ready once ``status`` shows the runtime registered. The pod's logic is
``mirror/fleet/data/k8s-node.py``, shipped in a ConfigMap; the operator's public key comes from a
ConfigMap too (rendered here from ``--keyring``, or one the operator already has).

Whose tools do the work (``--tools``):

- ``host`` (default): a tiny image (busybox: sh, cp, chroot) copies the program, key and bundle
  into the host's ``/var/cache/gpu-airgap/k8s`` and runs it under ``chroot /host`` with
  ``--root /``. The node's own python3, gpg, dpkg/rpm and systemctl do the work, exactly as with
  ``install.sh``, so the rpm database format and package tool always match the node's OS.
- ``image``: the image's python3, gpg, tar, zstd and dpkg/rpm run the installer with
  ``--root /host`` (deploy/kubernetes/Containerfile builds such an image). For nodes without python3.

Rendering is pure: :func:`render` takes the options, the pod script and the key text and returns
multi-document YAML; the CLI reads the files and writes the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlparse

import yaml

from configure import runtimeclass
from configure.distros import NAMES as DISTROS
from configure.validate import CDI_CHOICES, RUNTIME_CHOICES
from plumbing.errors import UsageError
from plumbing.version import VERSION

APP_LABEL = "app.kubernetes.io/name"
IMAGE_FOR_TOOLS = {"host": "busybox:1.36", "image": f"gpu-airgap-node:{VERSION}"}  #: --image defaults
TOOLS = tuple(IMAGE_FOR_TOOLS)
HOST_CACHE = "/var/cache/gpu-airgap/k8s"  #: on the node, where --tools host keeps the program, key and bundle
DEFAULT_NODE_SELECTOR = ("nvidia.com/gpu.present=true",)
DEFAULT_TOLERATIONS = ("nvidia.com/gpu:NoSchedule",)
KEYRING_KEY = "operator.asc"  #: the key's name in the keyring ConfigMap
BUNDLE_KEY = "bundle"  #: the bundle's name in the bundle ConfigMap (binaryData)
HOST_ROOT = "/host"
RUNTIMES = RUNTIME_CHOICES
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class K8sOptions:
    """The command's flags; :meth:`validate` refuses what the API server or the installer would."""

    bundle_url: Optional[str] = None
    bundle_configmap: Optional[str] = None
    keyring_configmap: Optional[str] = None  #: None: a ConfigMap is rendered from the key text
    image: Optional[str] = None  #: None: IMAGE_FOR_TOOLS[tools]
    tools: str = "host"
    namespace: str = "gpu-airgap"
    name: str = "gpu-airgap-node"
    node_selector: Tuple[str, ...] = DEFAULT_NODE_SELECTOR
    tolerations: Tuple[str, ...] = DEFAULT_TOLERATIONS
    runtime: str = "auto"
    runtime_name: str = "nvidia"
    set_as_default: bool = False
    cdi: str = "auto"
    hold: bool = False
    runtimeclass: bool = True
    distro: Optional[str] = None  #: the nodes' containerd (``--distro``, passed to install); None: each node detects

    def validate(self) -> None:
        """:raises UsageError: naming the first bad option."""
        if (self.bundle_url is None) == (self.bundle_configmap is None):
            raise UsageError("give exactly one of --bundle-url and --bundle-configmap")
        if self.bundle_url is not None and urlparse(self.bundle_url).scheme not in ("http", "https"):
            raise UsageError(f"--bundle-url {self.bundle_url!r} must be an http:// or https:// URL")
        for flag, value in (("--namespace", self.namespace), ("--name", self.name),
                            ("--bundle-configmap", self.bundle_configmap), ("--keyring-configmap", self.keyring_configmap)):  # fmt: skip
            if value is not None and (len(value) > 63 or not _DNS_LABEL.match(value)):
                raise UsageError(f"{flag} {value!r} must be a lowercase DNS label such as gpu-airgap")
        if self.runtime not in RUNTIMES:
            raise UsageError(f"--runtime must be one of {', '.join(RUNTIMES)}, not {self.runtime!r}")
        if self.cdi not in CDI_CHOICES:
            raise UsageError(f"--cdi must be one of {', '.join(CDI_CHOICES)}, not {self.cdi!r}")
        if self.tools not in TOOLS:
            raise UsageError(f"--tools must be one of {', '.join(TOOLS)}, not {self.tools!r}")
        if self.image is not None and (not self.image or any(c.isspace() for c in self.image)):
            raise UsageError(f"--image {self.image!r} must be an image reference such as registry.local/gpu-airgap-node:{VERSION}")
        parse_node_selector(self.node_selector)
        for toleration in self.tolerations:
            parse_toleration(toleration)
        runtimeclass.manifest(self.runtime_name, self.runtime_name)  # the handler must be a DNS label
        if self.distro is not None and self.distro not in DISTROS:
            raise UsageError(f"--distro must be one of {', '.join(DISTROS)}, not {self.distro!r}")
        runtimeclass_note(self)


def runtimeclass_note(options: K8sOptions) -> Optional[str]:
    """Why no RuntimeClass is emitted although one was asked for (k3s deploys its own), else None.

    :raises UsageError: when k3s's own RuntimeClass of that name has another handler.
    """
    if not options.runtimeclass or options.runtime == "none" or options.distro != "k3s":
        return None
    return runtimeclass.k3s_clash(options.runtime_name, options.runtime_name)


def parse_node_selector(items: Tuple[str, ...]) -> Dict[str, str]:
    """``key=value`` pairs as a nodeSelector.

    :raises UsageError: for an item without ``=`` or an invalid label key or value.
    """
    selector: Dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _LABEL_NAME.match(key) or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise UsageError(f"--node-selector {item!r} must be LABEL=VALUE, for example nvidia.com/gpu.present=true")
        selector[key] = value
    return selector


def parse_toleration(text: str) -> Dict[str, str]:
    """``KEY[=VALUE][:EFFECT]`` as a toleration (no value: operator Exists).

    :raises UsageError: for an invalid key, value or effect.
    """
    spec, _, effect = text.partition(":")
    key, sep, value = spec.partition("=")
    if not _LABEL_NAME.match(key) or (sep and not _LABEL_VALUE.match(value)) or (effect and effect not in EFFECTS):
        raise UsageError(f"--toleration {text!r} must be KEY[=VALUE][:EFFECT] with EFFECT one of {', '.join(EFFECTS)}")
    toleration = {"key": key, "operator": "Equal" if sep else "Exists"}
    if sep:
        toleration["value"] = value
    if effect:
        toleration["effect"] = effect
    return toleration


def documents(options: K8sOptions, script: str, keyring_text: Optional[str]) -> List[Dict[str, Any]]:
    """The objects to apply: Namespace, ConfigMaps (script, key), DaemonSet, RuntimeClass.

    :param script: the pod's program (``mirror/fleet/data/k8s-node.py``).
    :param keyring_text: the operator's armored public key; required unless ``keyring_configmap``.
    :raises UsageError: for invalid options, or no key at all.
    """
    options.validate()
    if (keyring_text is None) == (options.keyring_configmap is None):
        raise UsageError("give exactly one of --keyring and --keyring-configmap")
    meta = _meta(options)
    # The pod is privileged with hostPID: namespaces that enforce Pod Security "baseline" would refuse it.
    namespace = {"name": options.namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}
    docs: List[Dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": namespace}]
    docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{options.name}-script"), "data": {"k8s-node.py": script}})
    keyring_map = options.keyring_configmap or f"{options.name}-keyring"
    if keyring_text is not None:
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(keyring_map), "data": {KEYRING_KEY: keyring_text}})
    docs.append(_daemonset(options, meta, keyring_map))
    if options.runtimeclass and options.runtime != "none" and runtimeclass_note(options) is None:
        docs.append(runtimeclass.manifest(options.runtime_name, options.runtime_name))
    return docs


def render(options: K8sOptions, script: str, keyring_text: Optional[str]) -> str:
    """:func:`documents` as multi-document YAML (scripts and keys as readable block scalars)."""
    return yaml.dump_all(documents(options, script, keyring_text), Dumper=_BlockDumper, sort_keys=False, default_flow_style=False)


Meta = Callable[[str], Dict[str, Any]]


def _meta(options: K8sOptions) -> Meta:
    """Metadata for a namespaced object of this rollout, by name."""
    def meta(name: str) -> Dict[str, Any]:
        return {"name": name, "namespace": options.namespace,
                "labels": {APP_LABEL: options.name, "app.kubernetes.io/managed-by": "gpu-airgap"}}  # fmt: skip

    return meta


# --tools host: stage the program, key and bundle on the node, then run the program with the node's
# python3 inside its root. The bundle URL is fetched here, in the pod's network with the cluster's
# DNS: inside the chroot the node's resolver (127.0.0.53 with systemd-resolved) does not answer.
# exec: python3 gets SIGTERM when the pod stops.
HOST_WRAPPER = f"""set -eu
cache="$GPU_AIRGAP_HOST_MOUNT$GPU_AIRGAP_CACHE"
mkdir -p "$cache"
cp /etc/gpu-airgap/script/k8s-node.py "$cache/k8s-node.py"
cp /etc/gpu-airgap/keyring/{KEYRING_KEY} "$cache/{KEYRING_KEY}"
if [ -n "${{GPU_AIRGAP_BUNDLE_URL:-}}" ]; then
  echo "gpu-airgap-k8s: fetching $GPU_AIRGAP_BUNDLE_URL" >&2
  wget -q -O "$cache/bundle.part" "$GPU_AIRGAP_BUNDLE_URL" \\
    || {{ echo "gpu-airgap-k8s: could not fetch the bundle from $GPU_AIRGAP_BUNDLE_URL" >&2; exit 1; }}
  mv "$cache/bundle.part" "$cache/bundle"
  export GPU_AIRGAP_BUNDLE_FILE="$GPU_AIRGAP_CACHE/bundle"
  unset GPU_AIRGAP_BUNDLE_URL
elif [ -e /etc/gpu-airgap/bundle/{BUNDLE_KEY} ]; then
  cp /etc/gpu-airgap/bundle/{BUNDLE_KEY} "$cache/bundle.configmap"
fi
exec chroot "$GPU_AIRGAP_HOST_MOUNT" python3 -I -S "$GPU_AIRGAP_CACHE/k8s-node.py"
"""


def _env(options: K8sOptions) -> List[Dict[str, str]]:
    on_host = options.tools == "host"
    values = {
        "GPU_AIRGAP_HOST_ROOT": "/" if on_host else HOST_ROOT,
        "GPU_AIRGAP_KEYRING": f"{HOST_CACHE}/{KEYRING_KEY}" if on_host else f"/etc/gpu-airgap/keyring/{KEYRING_KEY}",
        "GPU_AIRGAP_RUNTIME": options.runtime,
        "GPU_AIRGAP_RUNTIME_NAME": options.runtime_name,
        "GPU_AIRGAP_SET_AS_DEFAULT": str(options.set_as_default).lower(),
        "GPU_AIRGAP_CDI": options.cdi,
        "GPU_AIRGAP_HOLD": str(options.hold).lower(),
    }
    if options.distro is not None:  # the same detection as on the node, overridden the same way
        values["GPU_AIRGAP_DISTRO"] = options.distro
    if on_host:
        values.update(GPU_AIRGAP_HOST_MOUNT=HOST_ROOT, GPU_AIRGAP_CACHE=HOST_CACHE, GPU_AIRGAP_READY_FILE=f"{HOST_CACHE}/ready")
    if options.bundle_url is not None:
        values["GPU_AIRGAP_BUNDLE_URL"] = options.bundle_url
    else:
        values["GPU_AIRGAP_BUNDLE_FILE"] = f"{HOST_CACHE}/bundle.configmap" if on_host else f"/etc/gpu-airgap/bundle/{BUNDLE_KEY}"
    return [{"name": k, "value": v} for k, v in values.items()]


def _commands(options: K8sOptions) -> Tuple[List[str], List[str]]:
    """The container's command and its readiness probe's."""
    if options.tools == "host":
        program = ["python3", "-I", "-S", f"{HOST_CACHE}/k8s-node.py"]
        return ["/bin/sh", "-c", HOST_WRAPPER], ["chroot", HOST_ROOT, *program, "ready"]
    script = ["python3", "/etc/gpu-airgap/script/k8s-node.py"]
    return script, [*script, "ready"]


def _daemonset(options: K8sOptions, meta: Meta, keyring_map: str) -> Dict[str, Any]:
    labels = {APP_LABEL: options.name}
    mounts: List[Dict[str, Any]] = [
        # HostToContainer: mounts made on the host later (a new /run tmpfs entry) are seen too.
        {"name": "host-root", "mountPath": HOST_ROOT, "mountPropagation": "HostToContainer"},
        {"name": "script", "mountPath": "/etc/gpu-airgap/script", "readOnly": True},
        {"name": "keyring", "mountPath": "/etc/gpu-airgap/keyring", "readOnly": True},
    ]
    volumes: List[Dict[str, Any]] = [
        {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}},
        {"name": "script", "configMap": {"name": f"{options.name}-script"}},
        {"name": "keyring", "configMap": {"name": keyring_map}},
    ]
    if options.bundle_configmap is not None:
        mounts.append({"name": "bundle", "mountPath": "/etc/gpu-airgap/bundle", "readOnly": True})
        volumes.append({"name": "bundle", "configMap": {"name": options.bundle_configmap}})
    command, probe = _commands(options)
    container = {
        "name": "install",
        "image": options.image or IMAGE_FOR_TOOLS[options.tools],
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": _env(options),
        # privileged: dpkg/rpm write the host's root and systemctl restarts its engine
        "securityContext": {"privileged": True},
        "volumeMounts": mounts,
        "readinessProbe": {
            "exec": {"command": probe},
            "initialDelaySeconds": 5,
            "periodSeconds": 30,
            "timeoutSeconds": 20,
            "failureThreshold": 3,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(options.name),
        "spec": {
            "selector": {"matchLabels": labels},
            # updates roll one node at a time: a not-ready pod stops them (the first apply starts every pod at once)
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {**labels, "app.kubernetes.io/managed-by": "gpu-airgap"}},
                "spec": {
                    "nodeSelector": parse_node_selector(options.node_selector),
                    "tolerations": [parse_toleration(t) for t in options.tolerations],
                    # the host's PID 1 is visible, so `chroot /host systemctl` talks to the host's systemd
                    "hostPID": True,
                    "automountServiceAccountToken": False,
                    "priorityClassName": "system-node-critical",
                    # dpkg/rpm must not be killed mid-install: the program finishes the install first
                    "terminationGracePeriodSeconds": 300,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


class _BlockDumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as ``|`` block scalars."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)
