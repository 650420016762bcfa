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

Where the bundle comes from: ``--bundle oci://…`` (pinned to its manifest digest; each node pulls it
from the registry with the node's own network, as the kubelet pulls images), ``--bundle-url`` or a
ConfigMap. The digest goes into the pod template, so a new bundle is a new template and the
DaemonSet rolls at ``--max-unavailable`` (10% by default; ``--on-delete`` for the canary step), and
the readiness probe holds a node back until its recorded install is that bundle.

Why a DaemonSet and not a Job per node pool: a DaemonSet follows the nodes (one that joins a pool
later is installed with no one acting), its rolling update is the rollout controller we need
(maxUnavailable, a not-ready pod stops it), and ``kubectl rollout status/undo`` work on it. The
price is one idle pod per node after the install: a sleeping python3 with small requests.

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
from configure.distros.detection import NAMES as DISTROS
from configure.validate import CDI_CHOICES, RUNTIME_CHOICES
from plumbing.errors import UsageError
from plumbing.keyfile import parse_fingerprint
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
DEFAULT_MAX_UNAVAILABLE = (
    "10%"  #: how many nodes an update takes down at once (docs/fleet.md "Rolling a new bundle")
)
DIGEST_ANNOTATION = (
    "gpu-airgap.io/bundle-digest"  #: in the pod template: a new bundle is a new template, so it rolls
)
REGISTRY_CONFIG = "/etc/gpu-airgap/registry/.dockerconfigjson"  #: where the --registry-secret is mounted
REGISTRY_CA = "/etc/gpu-airgap/registry-ca/ca.pem"  #: where the --registry-ca ConfigMap is mounted
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class K8sOptions:
    """The command's flags; :meth:`validate` refuses what the API server or the installer would."""

    bundle_url: Optional[str] = None
    bundle_configmap: Optional[str] = None
    bundle_ref: Optional[str] = (
        None  #: oci://HOST/REPO@sha256:… (pinned): the pod pulls it from the registry by digest
    )
    bundle_digest: Optional[str] = (
        None  #: sha256:… of the bundle file, or the artifact's manifest digest for bundle_ref
    )
    max_unavailable: str = DEFAULT_MAX_UNAVAILABLE
    on_delete: bool = False  #: updateStrategy OnDelete: the canary step (docs/fleet.md)
    registry_secret: Optional[str] = None  #: a kubernetes.io/dockerconfigjson Secret for the registry
    registry_plain_http: bool = False
    registry_ca_text: Optional[str] = (
        None  #: PEM of the registry's CA (--registry-ca), rendered as a ConfigMap
    )
    take_over: bool = False  #: install --force: take over from the GPU Operator
    keyring_configmap: Optional[str] = None  #: None: a ConfigMap is rendered from the key text
    fingerprint: Optional[str] = None  #: the one key of the operator key file to trust (--fingerprint)
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
    distro: Optional[str] = (
        None  #: the nodes' containerd (``--distro``, passed to install); None: each node detects
    )

    def validate(self) -> None:
        """:raises UsageError: naming the first bad option."""
        if sum(x is not None for x in (self.bundle_url, self.bundle_configmap, self.bundle_ref)) != 1:
            raise UsageError("give exactly one of --bundle oci://…, --bundle-url and --bundle-configmap")
        if self.bundle_digest is None or not _DIGEST.match(self.bundle_digest):
            raise UsageError(
                "the bundle's sha256 must go into the pod template so that a new bundle rolls the DaemonSet: "
                "give --bundle-file FILE (a local copy) or --bundle-sha256 HEX"
            )
        if self.bundle_ref is not None and not self.bundle_ref.endswith("@" + self.bundle_digest):
            raise UsageError(
                f"--bundle {self.bundle_ref!r} must be pinned to its digest (oci://HOST/REPO@sha256:…)"
            )
        parse_max_unavailable(self.max_unavailable)
        if self.fingerprint is not None:
            parse_fingerprint(self.fingerprint)
        if self.registry_ca_text is not None and self.bundle_ref is None:
            raise UsageError("--registry-ca applies to --bundle oci://… only")
        if self.registry_secret is not None and (
            len(self.registry_secret) > 253 or not _DNS_SUBDOMAIN.match(self.registry_secret)
        ):
            raise UsageError(
                f"--registry-secret {self.registry_secret!r} must be the name of a Secret such as registry-pull"
            )
        if self.bundle_url is not None and urlparse(self.bundle_url).scheme not in ("http", "https"):
            raise UsageError(f"--bundle-url {self.bundle_url!r} must be an http:// or https:// URL")
        for flag, value in (
            ("--namespace", self.namespace),
            ("--name", self.name),
            ("--bundle-configmap", self.bundle_configmap),
            ("--keyring-configmap", self.keyring_configmap),
        ):
            if value is not None and (len(value) > 63 or not _DNS_LABEL.match(value)):
                raise UsageError(f"{flag} {value!r} must be a lowercase DNS label such as gpu-airgap")
        if self.runtime not in RUNTIMES:
            raise UsageError(f"--runtime must be one of {', '.join(RUNTIMES)}, not {self.runtime!r}")
        if self.cdi not in CDI_CHOICES:
            raise UsageError(f"--cdi must be one of {', '.join(CDI_CHOICES)}, not {self.cdi!r}")
        if self.tools not in TOOLS:
            raise UsageError(f"--tools must be one of {', '.join(TOOLS)}, not {self.tools!r}")
        if self.image is not None and (not self.image or any(c.isspace() for c in self.image)):
            raise UsageError(
                f"--image {self.image!r} must be an image reference such as registry.local/gpu-airgap-node:{VERSION}"
            )
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
            raise UsageError(
                f"--node-selector {item!r} must be LABEL=VALUE, for example nvidia.com/gpu.present=true"
            )
        selector[key] = value
    return selector


def parse_max_unavailable(text: str) -> int | str:
    """``--max-unavailable``: a count of nodes (>= 1) or a percentage (1%-100%) of the matching nodes.

    :raises UsageError: for anything else.
    """
    match = re.match(r"^([0-9]{1,6})(%?)$", text)
    number = int(match.group(1)) if match else 0
    if not match or number < 1 or (match.group(2) and number > 100):
        raise UsageError(
            f"--max-unavailable {text!r} must be a number of nodes (1, 50) or a percentage (10%)"
        )
    return text if match.group(2) else number


def parse_toleration(text: str) -> Dict[str, str]:
    """``KEY[=VALUE][:EFFECT]`` as a toleration (no value: operator Exists).

    :raises UsageError: for an invalid key, value or effect.
    """
    spec, _, effect = text.partition(":")
    key, sep, value = spec.partition("=")
    if (
        not _LABEL_NAME.match(key)
        or (sep and not _LABEL_VALUE.match(value))
        or (effect and effect not in EFFECTS)
    ):
        raise UsageError(
            f"--toleration {text!r} must be KEY[=VALUE][:EFFECT] with EFFECT one of {', '.join(EFFECTS)}"
        )
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
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(f"{options.name}-script"),
            "data": {"k8s-node.py": script},
        }
    )
    keyring_map = options.keyring_configmap or f"{options.name}-keyring"
    if keyring_text is not None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta(keyring_map),
                "data": {KEYRING_KEY: keyring_text},
            }
        )
    if options.registry_ca_text is not None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta(f"{options.name}-registry-ca"),
                "data": {"ca.pem": options.registry_ca_text},
            }
        )
    docs.append(_daemonset(options, meta, keyring_map))
    if options.runtimeclass and options.runtime != "none" and runtimeclass_note(options) is None:
        runtime_class = runtimeclass.manifest(options.runtime_name, options.runtime_name)
        # pods asking for the runtime land only on the nodes this DaemonSet installs it on
        runtime_class["scheduling"] = {"nodeSelector": parse_node_selector(options.node_selector)}
        docs.append(runtime_class)
    return docs


def render(options: K8sOptions, script: str, keyring_text: Optional[str]) -> str:
    """:func:`documents` as multi-document YAML (scripts and keys as readable block scalars)."""
    return yaml.dump_all(
        documents(options, script, keyring_text),
        Dumper=_BlockDumper,
        sort_keys=False,
        default_flow_style=False,
    )


Meta = Callable[[str], Dict[str, Any]]


def _meta(options: K8sOptions) -> Meta:
    """Metadata for a namespaced object of this rollout, by name."""

    def meta(name: str) -> Dict[str, Any]:
        return {
            "name": name,
            "namespace": options.namespace,
            "labels": {APP_LABEL: options.name, "app.kubernetes.io/managed-by": "gpu-airgap"},
        }

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
if [ -e {REGISTRY_CONFIG} ]; then
  (umask 077 && cp {REGISTRY_CONFIG} "$cache/registry.json")
fi
if [ -e {REGISTRY_CA} ]; then
  cp {REGISTRY_CA} "$cache/registry-ca.pem"
fi
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
        "GPU_AIRGAP_KEYRING": f"{HOST_CACHE}/{KEYRING_KEY}"
        if on_host
        else f"/etc/gpu-airgap/keyring/{KEYRING_KEY}",
        "GPU_AIRGAP_RUNTIME": options.runtime,
        "GPU_AIRGAP_RUNTIME_NAME": options.runtime_name,
        "GPU_AIRGAP_SET_AS_DEFAULT": str(options.set_as_default).lower(),
        "GPU_AIRGAP_CDI": options.cdi,
        "GPU_AIRGAP_HOLD": str(options.hold).lower(),
        "GPU_AIRGAP_TAKE_OVER": str(options.take_over).lower(),
    }
    if options.fingerprint is not None:  # the pod's check of the node tool and the installer's --fingerprint
        values["GPU_AIRGAP_FINGERPRINT"] = parse_fingerprint(options.fingerprint)
    if options.distro is not None:  # the same detection as on the node, overridden the same way
        values["GPU_AIRGAP_DISTRO"] = options.distro
    if on_host:
        values.update(
            GPU_AIRGAP_HOST_MOUNT=HOST_ROOT,
            GPU_AIRGAP_CACHE=HOST_CACHE,
            GPU_AIRGAP_READY_FILE=f"{HOST_CACHE}/ready",
        )
    values["GPU_AIRGAP_BUNDLE_DIGEST"] = str(options.bundle_digest)
    if options.bundle_ref is not None:
        values["GPU_AIRGAP_BUNDLE_REF"] = options.bundle_ref
        values["GPU_AIRGAP_REGISTRY_PLAIN_HTTP"] = str(options.registry_plain_http).lower()
        if options.registry_ca_text is not None:
            values["GPU_AIRGAP_REGISTRY_CA"] = f"{HOST_CACHE}/registry-ca.pem" if on_host else REGISTRY_CA
        if options.registry_secret is not None:
            values["GPU_AIRGAP_REGISTRY_CONFIG"] = (
                f"{HOST_CACHE}/registry.json" if on_host else REGISTRY_CONFIG
            )
    elif options.bundle_url is not None:
        values["GPU_AIRGAP_BUNDLE_URL"] = options.bundle_url
    else:
        values["GPU_AIRGAP_BUNDLE_FILE"] = (
            f"{HOST_CACHE}/bundle.configmap" if on_host else f"/etc/gpu-airgap/bundle/{BUNDLE_KEY}"
        )
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
    if options.registry_ca_text is not None:
        mounts.append({"name": "registry-ca", "mountPath": REGISTRY_CA.rsplit("/", 1)[0], "readOnly": True})
        volumes.append({"name": "registry-ca", "configMap": {"name": f"{options.name}-registry-ca"}})
    if options.registry_secret is not None:
        mounts.append({"name": "registry", "mountPath": REGISTRY_CONFIG.rsplit("/", 1)[0], "readOnly": True})
        volumes.append(
            {"name": "registry", "secret": {"secretName": options.registry_secret, "defaultMode": 0o400}}
        )
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
            # frequent and cheap (the full check runs every 5 minutes): a rollout moves on seconds after a node is done
            "initialDelaySeconds": 2,
            "periodSeconds": 5,
            "timeoutSeconds": 20,
            "failureThreshold": 3,
        },
        # after the install the pod only sleeps: the requests are sized for that (the install itself is short)
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
    }
    pod: Dict[str, Any] = {
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
    }
    if options.bundle_ref is not None:
        # The node reaches its registry (the kubelet pulls images from it) with its own routes and
        # resolver; under --tools host the pull runs inside the node's root, which has only those.
        pod.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    if options.registry_secret is not None:
        pod["imagePullSecrets"] = [{"name": options.registry_secret}]
    strategy: Dict[str, Any] = (
        {"type": "OnDelete"}
        if options.on_delete
        else {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": parse_max_unavailable(options.max_unavailable)},
        }
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(options.name),
        "spec": {
            "selector": {"matchLabels": labels},
            # a node whose pod is not ready (install failed, runtime not registered) counts as unavailable,
            # so a bad bundle stops the rollout after max-unavailable nodes
            "updateStrategy": strategy,
            "template": {
                "metadata": {
                    "labels": {**labels, "app.kubernetes.io/managed-by": "gpu-airgap"},
                    "annotations": {DIGEST_ANNOTATION: str(options.bundle_digest)},
                },
                "spec": pod,
            },
        },
    }


class _BlockDumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as ``|`` block scalars."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)
