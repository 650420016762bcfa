"""``gpu-airgap fleet k8s``: a thin typer command over :mod:`mirror.fleet.k8s`.

The Ansible path needs no command: it is the role under ``deploy/ansible`` (see README "Fleet rollout").
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import List, Optional

import click
import typer

from configure.distros import NAMES as DISTROS
from configure.validate import CDI_CHOICES
from mirror.fleet import k8s as fleet_k8s
from plumbing.clikit import Group, legacy_spellings
from plumbing.errors import UsageError
from plumbing.fsutil import atomic_write
from plumbing.gpg import check_key_file
from plumbing.output import emit_lines, warn

fleet_app = typer.Typer(cls=Group, help="Roll the toolkit out to many nodes: Kubernetes manifests (Ansible: deploy/ansible).", no_args_is_help=True)


def pod_script() -> str:
    """The DaemonSet container's program, shipped as package data."""
    return resources.files("mirror.fleet").joinpath("data/k8s-node.py").read_text(encoding="utf-8")


_BUNDLE_URL = typer.Option(None, "--bundle-url", metavar="URL", help="Where every node fetches the bundle (http/https).")
_BUNDLE_CONFIGMAP = typer.Option(
    None, "--bundle-configmap", metavar="NAME", help="A ConfigMap holding the bundle under binaryData key 'bundle' (1 MiB limit)."
)
_KEYRING = typer.Option(None, "--keyring", metavar="FILE", help="The operator's public key, embedded in a ConfigMap.")
_KEYRING_CONFIGMAP = typer.Option(
    None, "--keyring-configmap", metavar="NAME", help="An existing ConfigMap with the key under 'operator.asc'."
)
_TOOLS = typer.Option(
    "host", "--tools", click_type=click.Choice(fleet_k8s.TOOLS), help="host: the node's own python3, gpg and dpkg/rpm under chroot (default) | image: the image's."
)
_IMAGE = typer.Option(
    None, "--image", help="Container image. Default busybox:1.36 with --tools host (sh, cp, chroot), "
    "gpu-airgap-node:VERSION with --tools image (deploy/kubernetes/Containerfile).",
)
_NAMESPACE = typer.Option("gpu-airgap", "--namespace", help="Namespace of the DaemonSet and its ConfigMaps.")
_NAME = typer.Option("gpu-airgap-node", "--name", help="Name of the DaemonSet.")
_NODE_SELECTOR = typer.Option(
    list(fleet_k8s.DEFAULT_NODE_SELECTOR), "--node-selector", metavar="LABEL=VALUE", help="Repeat for several."
)
_TOLERATION = typer.Option(
    list(fleet_k8s.DEFAULT_TOLERATIONS), "--toleration", metavar="KEY[=VALUE][:EFFECT]", help="Repeat for several."
)
_RUNTIME = typer.Option("auto", "--runtime", click_type=click.Choice(fleet_k8s.RUNTIMES), help="auto | containerd | docker | crio | podman | lxc | none")
_RUNTIME_NAME = typer.Option("nvidia", "--runtime-name", help="Runtime name, also the RuntimeClass name and handler.")
_SET_AS_DEFAULT = typer.Option(False, "--set-as-default", help="Make it the engine's default runtime (not advised).")
_CDI = typer.Option("auto", "--cdi", click_type=click.Choice(CDI_CHOICES), help="auto (when a driver is present) | on | off")
_HOLD = typer.Option(False, "--hold", help="Keep the nodes on this release.")
_NO_RUNTIMECLASS = typer.Option(False, "--no-runtimeclass", help="Leave the RuntimeClass out.")
_DISTRO = typer.Option(
    None, "--distro", click_type=click.Choice(DISTROS),
    help="The nodes' Kubernetes distribution (default: each node detects it); k3s: no RuntimeClass of k3s's own name.",
)  # fmt: skip
_OUTPUT = typer.Option("-", "--output", metavar="FILE|-", help="Write the manifests here (- is stdout).")


def k8s_command(
    bundle_url: Optional[str] = _BUNDLE_URL,
    bundle_configmap: Optional[str] = _BUNDLE_CONFIGMAP,
    keyring: Optional[Path] = _KEYRING,
    keyring_configmap: Optional[str] = _KEYRING_CONFIGMAP,
    tools: str = _TOOLS,
    image: Optional[str] = _IMAGE,
    namespace: str = _NAMESPACE,
    name: str = _NAME,
    node_selector: List[str] = _NODE_SELECTOR,
    toleration: List[str] = _TOLERATION,
    runtime: str = _RUNTIME,
    runtime_name: str = _RUNTIME_NAME,
    set_as_default: bool = _SET_AS_DEFAULT,
    cdi: str = _CDI,
    hold: bool = _HOLD,
    no_runtimeclass: bool = _NO_RUNTIMECLASS,
    out: str = _OUTPUT,
    distro: Optional[str] = _DISTRO,
) -> None:
    """Write a DaemonSet (plus RuntimeClass) that installs the bundle on every GPU node: kubectl apply -f it."""
    options = fleet_k8s.K8sOptions(
        bundle_url=bundle_url, bundle_configmap=bundle_configmap, keyring_configmap=keyring_configmap, image=image, tools=tools,
        namespace=namespace, name=name, node_selector=tuple(node_selector), tolerations=tuple(toleration),
        runtime=runtime, runtime_name=runtime_name, set_as_default=set_as_default, cdi=cdi, hold=hold,
        runtimeclass=not no_runtimeclass, distro=distro,
    )  # fmt: skip
    keyring_text = _read_key(keyring) if keyring is not None else None
    text = fleet_k8s.render(options, pod_script(), keyring_text)
    note = fleet_k8s.runtimeclass_note(options)
    if note is not None:
        warn(note)
    if out == "-":
        emit_lines([text.rstrip("\n")])
    else:
        atomic_write(Path(out), text.encode())


def _read_key(path: Path) -> str:
    check_key_file(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the operator key {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN PGP PUBLIC KEY BLOCK-----" not in data:
        raise UsageError(f"{path} is not an armored public key (gpg --armor --export KEY > {path.name})")
    return data.decode("ascii", errors="replace")


fleet_app.command("k8s", cls=legacy_spellings({"--out": "--output"}))(k8s_command)
