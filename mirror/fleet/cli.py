"""``gpu-airgap fleet k8s``: a thin typer command over :mod:`mirror.fleet.k8s`.

The Ansible path needs no command: it is the role under ``deploy/ansible`` (see docs/fleet.md).
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
from importlib import resources
from pathlib import Path
from typing import List, Optional, Tuple

import click
import typer

from configure.distros.detection import NAMES as DISTROS
from configure.validate import CDI_CHOICES
from mirror.fleet import image as fleet_image
from mirror.fleet import k8s as fleet_k8s
from plumbing.clikit import Group, given, option_name, refuse_json_to_stdout
from plumbing.errors import UsageError
from plumbing.gpg import Keyring
from plumbing.keyfile import check_key_file
from plumbing.output import emit_json, emit_lines, warn
from plumbing.output_target import output_is_stream, write_output
from plumbing.proc import run
from plumbing.version import VERSION

fleet_app = typer.Typer(
    cls=Group,
    help="Roll the toolkit out to many nodes: Kubernetes manifests (Ansible: deploy/ansible).",
    no_args_is_help=True,
)


def pod_script() -> str:
    """The DaemonSet container's program, shipped as package data."""
    return resources.files("mirror.fleet").joinpath("data/k8s-node.py").read_text(encoding="utf-8")


#: help marks options of which one is required (click only marks options required alone)
ONE_OF_BUNDLE = "(required: one of --bundle, --bundle-url, --bundle-configmap)"
ONE_OF_KEY = "(required: one of --keyring, --keyring-configmap)"
ONE_OF_IMAGE = "(required: --output, --push or both)"
_BUNDLE = typer.Option(
    None,
    "--bundle",
    metavar="oci://HOST[:PORT]/REPO:TAG|@sha256:…",
    help="The bundle in a registry (gpu-airgap bundle push): each node pulls it by digest (a tag is resolved now). "
    + ONE_OF_BUNDLE,
)
_BUNDLE_FILE = typer.Option(
    None,
    "--bundle-file",
    metavar="FILE",
    help="A local copy of the URL's or ConfigMap's bundle: its sha256 goes into the pod template.",
)
_BUNDLE_SHA256 = typer.Option(
    None,
    "--bundle-sha256",
    metavar="HEX",
    help="The sha256 of the URL's or ConfigMap's bundle (instead of --bundle-file).",
)
_MAX_UNAVAILABLE = typer.Option(
    fleet_k8s.DEFAULT_MAX_UNAVAILABLE,
    "--max-unavailable",
    metavar="N|N%",
    help="Nodes an update takes down at once: a count or a percentage.",
)
_ON_DELETE = typer.Option(
    False,
    "--on-delete",
    help="updateStrategy OnDelete: only deleted pods get the new bundle (the canary step).",
)
_REGISTRY_SECRET = typer.Option(
    None,
    "--registry-secret",
    metavar="NAME",
    help="A kubernetes.io/dockerconfigjson Secret: the pod's registry credentials and imagePullSecret.",
)
_TAKE_OVER = typer.Option(
    False,
    "--take-over",
    help="Take the runtime configuration over from the NVIDIA GPU Operator (install --force).",
)
_REGISTRY_CA = typer.Option(
    None,
    "--registry-ca",
    metavar="FILE",
    help="PEM of the CA that signed the registry's certificate (rendered as a ConfigMap for the pods).",
)
_REGISTRY_PLAIN_HTTP = typer.Option(
    False, "--registry-plain-http", help="The nodes speak plain http to the registry."
)
_BUNDLE_URL = typer.Option(
    None,
    "--bundle-url",
    metavar="URL",
    help="Where every node fetches the bundle (http/https). " + ONE_OF_BUNDLE,
)
_BUNDLE_CONFIGMAP = typer.Option(
    None,
    "--bundle-configmap",
    metavar="NAME",
    help="A ConfigMap holding the bundle under binaryData key 'bundle' (1 MiB limit). " + ONE_OF_BUNDLE,
)
_KEYRING = typer.Option(
    None,
    "--keyring",
    metavar="FILE",
    help="The operator's public key, embedded in a ConfigMap. " + ONE_OF_KEY,
)
_FINGERPRINT = typer.Option(
    None,
    "--fingerprint",
    metavar="FPR",
    help="Trust only this key of the operator key file (full 40-hex-digit fingerprint); "
    "required when it holds several keys.",
)
_KEYRING_CONFIGMAP = typer.Option(
    None,
    "--keyring-configmap",
    metavar="NAME",
    help="An existing ConfigMap with the key under 'operator.asc'. " + ONE_OF_KEY,
)
_TOOLS = typer.Option(
    "host",
    "--tools",
    click_type=click.Choice(fleet_k8s.TOOLS),
    help="host: the node's own python3, gpg and dpkg/rpm under chroot (default) | image: the image's.",
)
_IMAGE = typer.Option(
    None,
    "--image",
    help="Container image. Default busybox:1.36 with --tools host (sh, cp, chroot), "
    "gpu-airgap-node:VERSION with --tools image (deploy/kubernetes/Containerfile).",
)
_NAMESPACE = typer.Option("gpu-airgap", "--namespace", help="Namespace of the DaemonSet and its ConfigMaps.")
_NAME = typer.Option("gpu-airgap-node", "--name", help="Name of the DaemonSet.")
_NODE_SELECTOR = typer.Option(
    list(fleet_k8s.DEFAULT_NODE_SELECTOR),
    "--node-selector",
    metavar="LABEL=VALUE",
    help="Repeat for several.",
)
_TOLERATION = typer.Option(
    list(fleet_k8s.DEFAULT_TOLERATIONS),
    "--toleration",
    metavar="KEY[=VALUE][:EFFECT]",
    help="Repeat for several.",
)
_RUNTIME = typer.Option(
    "auto",
    "--runtime",
    click_type=click.Choice(fleet_k8s.RUNTIMES),
    help="auto | containerd | docker | crio | podman | lxc | none",
)
_RUNTIME_NAME = typer.Option(
    "nvidia", "--runtime-name", help="Runtime name, also the RuntimeClass name and handler."
)
_SET_AS_DEFAULT = typer.Option(
    False, "--set-as-default", help="Make it the engine's default runtime (not advised)."
)
_CDI = typer.Option(
    "auto", "--cdi", click_type=click.Choice(CDI_CHOICES), help="auto (when a driver is present) | on | off"
)
_HOLD = typer.Option(False, "--hold", help="Keep the nodes on this release.")
_NO_RUNTIMECLASS = typer.Option(False, "--no-runtimeclass", help="Leave the RuntimeClass out.")
_DISTRO = typer.Option(
    None,
    "--distro",
    click_type=click.Choice(DISTROS),
    help="The nodes' Kubernetes distribution (default: each node detects it); k3s: no RuntimeClass of k3s's own name.",
)
_OUTPUT = typer.Option("-", "--output", metavar="FILE|-", help="Write the manifests here (- is stdout).")
_JSON = typer.Option(False, "--json", help="Print one JSON object.")


def k8s_command(
    bundle: Optional[str] = _BUNDLE,
    bundle_url: Optional[str] = _BUNDLE_URL,
    bundle_configmap: Optional[str] = _BUNDLE_CONFIGMAP,
    bundle_file: Optional[Path] = _BUNDLE_FILE,
    bundle_sha256: Optional[str] = _BUNDLE_SHA256,
    max_unavailable: str = _MAX_UNAVAILABLE,
    on_delete: bool = _ON_DELETE,
    registry_secret: Optional[str] = _REGISTRY_SECRET,
    registry_plain_http: bool = _REGISTRY_PLAIN_HTTP,
    registry_ca: Optional[Path] = _REGISTRY_CA,
    take_over: bool = _TAKE_OVER,
    keyring: Optional[Path] = _KEYRING,
    keyring_configmap: Optional[str] = _KEYRING_CONFIGMAP,
    fingerprint: Optional[str] = _FINGERPRINT,
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
    json_output: bool = _JSON,
) -> None:
    """Write a DaemonSet (plus RuntimeClass) that installs the bundle on every GPU node: kubectl apply -f it."""
    refuse_json_to_stdout(json_output, Path(out))
    ca_text = _read_ca(registry_ca) if registry_ca is not None else None
    ref, digest = _bundle_identity(bundle, bundle_file, bundle_sha256, registry_plain_http, registry_ca)
    options = fleet_k8s.K8sOptions(
        bundle_url=bundle_url,
        bundle_configmap=bundle_configmap,
        bundle_ref=ref,
        bundle_digest=digest,
        max_unavailable=max_unavailable,
        on_delete=on_delete,
        registry_secret=registry_secret,
        registry_plain_http=registry_plain_http,
        registry_ca_text=ca_text,
        take_over=take_over,
        keyring_configmap=keyring_configmap,
        fingerprint=fingerprint,
        image=image,
        tools=tools,
        namespace=namespace,
        name=name,
        node_selector=tuple(node_selector),
        tolerations=tuple(toleration),
        runtime=runtime,
        runtime_name=runtime_name,
        set_as_default=set_as_default,
        cdi=cdi,
        hold=hold,
        runtimeclass=not no_runtimeclass,
        distro=distro,
    )
    keyring_text = _read_key(keyring, fingerprint) if keyring is not None else None
    text = fleet_k8s.render(options, pod_script(), keyring_text)
    note = fleet_k8s.runtimeclass_note(options)
    if note is not None:
        warn(note)
    if out == "-":
        emit_lines([text.rstrip("\n")])
        return
    write_output(Path(out), text.encode())
    if json_output:
        emit_json({"output": out, "bytes": len(text.encode()), "namespace": namespace, "name": name})


def _bundle_identity(
    bundle: Optional[str],
    bundle_file: Optional[Path],
    sha256: Optional[str],
    plain_http: bool,
    ca_file: Optional[Path],
) -> Tuple[Optional[str], Optional[str]]:
    """The pinned ``oci://`` reference (or None) and the digest the pod template carries.

    :raises UsageError: for a digest given twice or in the wrong form, or a file that cannot be read.
    """
    if bundle is not None:
        if bundle_file is not None or sha256 is not None:
            raise UsageError(
                "--bundle oci://… carries its own digest: leave out --bundle-file and --bundle-sha256"
            )
        return _pin(bundle, plain_http, ca_file)
    if bundle_file is not None and sha256 is not None:
        raise UsageError("give one of --bundle-file and --bundle-sha256")
    if sha256 is not None:
        if not re.match(r"^[0-9a-f]{64}$", sha256):
            raise UsageError(
                f"--bundle-sha256 {sha256!r} must be 64 lowercase hex digits (sha256sum's output)"
            )
        return None, f"sha256:{sha256}"
    if bundle_file is not None:
        try:
            return None, f"sha256:{_sha256_file(bundle_file)}"
        except OSError as exc:
            raise UsageError(f"cannot read the bundle {bundle_file}: {exc.strerror or exc}") from exc
    return None, None


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pin(text: str, plain_http: bool, ca_file: Optional[Path]) -> Tuple[str, str]:
    """``oci://HOST/REPO@sha256:…`` as given, or a tag resolved to its manifest digest by asking the registry."""
    from installer.cli.oci import registry_access
    from installer.oci import is_oci_reference
    from installer.oci.client import RegistryClient
    from installer.oci.reference import parse_reference
    from installer.oci.transfer import resolve

    if not is_oci_reference(text):
        raise UsageError(f"--bundle {text!r} must be an oci://HOST[:PORT]/REPO:TAG or @sha256:… reference")
    ref = parse_reference(text)
    if ref.digest is not None:
        return str(ref), ref.digest
    client = RegistryClient.for_reference(
        ref, registry_access(ref.host, None, False, str(ca_file) if ca_file else None, plain_http)
    )
    _, digest = resolve(ref, client)
    return str(ref.pinned(digest)), digest


_IMAGE_TOOLS = typer.Option(
    "host",
    "--tools",
    click_type=click.Choice(fleet_k8s.TOOLS),
    help="host: a static busybox | image: --rootfs.",
)
_BUSYBOX = typer.Option(
    Path("/bin/busybox"), "--busybox", help="A statically linked busybox (Debian's busybox-static)."
)
_ROOTFS = typer.Option(
    None, "--rootfs", help="--tools image: a root filesystem with python3, gpg, tar, zstd and dpkg/rpm."
)
_IMAGE_OUTPUT = typer.Option(
    None,
    "--output",
    metavar="FILE",
    help="Write an OCI image layout tar (ctr images import, skopeo oci-archive:). " + ONE_OF_IMAGE,
)
_PUSH = typer.Option(
    None,
    "--push",
    metavar="oci://HOST[:PORT]/REPO:TAG",
    help="Push the image to this registry. " + ONE_OF_IMAGE,
)
_TAG = typer.Option(f"gpu-airgap-tools:{VERSION}", "--tag", help="The image's name in the --output archive.")
_PLAIN_HTTP = typer.Option(
    False, "--plain-http", help="Speak plain http to the registry (loopback registries need not)."
)
_CA_FILE = typer.Option(None, "--ca-file", help="PEM file of the CA that signed the registry's certificate.")


def image_command(
    ctx: typer.Context,
    tools: str = _IMAGE_TOOLS,
    busybox: Path = _BUSYBOX,
    rootfs: Optional[Path] = _ROOTFS,
    output: Optional[Path] = _IMAGE_OUTPUT,
    push: Optional[str] = _PUSH,
    tag: str = _TAG,
    plain_http: bool = _PLAIN_HTTP,
    ca_file: Optional[str] = _CA_FILE,
    json_output: bool = _JSON,
) -> None:
    """Make the DaemonSet's tools image here (no base image pulled) and write it to a file or push it to the registry."""
    if output is None and push is None:
        raise UsageError("give --output FILE, --push oci://HOST/REPO:TAG, or both")
    _refuse_unused_image_options(ctx, tools, output, push)
    if output is not None:
        output_is_stream(output)  # a directory is refused before the image is built
        refuse_json_to_stdout(json_output, output)
    if tools == "host":
        data = _read_binary(busybox)
        if not fleet_image.is_static_elf(data):
            raise UsageError(f"{busybox} is not a statically linked busybox (install busybox-static)")
        applets = run([str(busybox), "--list"]).stdout.decode().split()
        image = fleet_image.build(fleet_image.busybox_entries(data, applets), ["/bin/sh"])
    elif rootfs is None:
        raise UsageError(
            "--tools image needs --rootfs DIR: a root filesystem with python3, gpg, tar, zstd and dpkg/rpm"
        )
    else:
        image = fleet_image.build(fleet_image.tree_entries(rootfs), ["python3"])
    lines, report = [], {"output": None, "tag": None, "pushed": None, "digest": image.manifest.digest}
    if output is not None:
        write_output(output, fleet_image.layout_archive(image, tag))
        lines.append(f"wrote {output} ({tag}, {image.manifest.digest})")
        report.update(output=str(output), tag=tag)
    if push is not None:
        report["pushed"] = _push_image(image, push, plain_http, ca_file)
        lines.append(f"pushed {report['pushed']}")
    emit_json(report) if json_output else emit_lines(lines)


def _refuse_unused_image_options(
    ctx: typer.Context, tools: str, output: Optional[Path], push: Optional[str]
) -> None:
    """:raises UsageError: for an option this combination would silently ignore."""
    unused = {
        "rootfs": "--tools host packs the static busybox, not a root filesystem" if tools == "host" else "",
        "busybox": "--tools image packs --rootfs, not a busybox" if tools == "image" else "",
        "tag": "--tag names the image inside the --output archive; a push is named by its reference"
        if output is None
        else "",
        "ca_file": "--ca-file is for the registry of --push" if push is None else "",
        "plain_http": "--plain-http is for the registry of --push" if push is None else "",
    }
    for name, why in unused.items():
        if why and given(ctx, name):
            raise UsageError(f"{option_name(ctx, name)} would be ignored here: {why}")


def _read_binary(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _push_image(image: fleet_image.Image, target: str, plain_http: bool, ca_file: Optional[str]) -> str:
    """Upload the blobs and the manifest; the pinned reference to give ``fleet k8s --image`` (without oci://)."""
    from installer.cli.oci import registry_access
    from installer.oci import is_oci_reference
    from installer.oci.client import RegistryClient
    from installer.oci.reference import parse_reference

    if not is_oci_reference(target):
        raise UsageError(f"--push {target!r} must be an oci://HOST[:PORT]/REPO:TAG reference")
    ref = parse_reference(target)
    client = RegistryClient.for_reference(ref, registry_access(ref.host, None, False, ca_file, plain_http))
    for blob in (image.layer, image.config):
        client.upload_blob(
            ref.repository, blob.digest, len(blob.data), functools.partial(io.BytesIO, blob.data)
        )
    digest = client.put_manifest(ref, image.manifest.data, fleet_image.MANIFEST_TYPE)
    return f"{ref.host}/{ref.repository}@{digest}"


def _read_ca(path: Path) -> str:
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read the registry CA {path}: {exc.strerror or exc}") from exc
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise UsageError(f"--registry-ca {path} is not a PEM certificate")
    return text


def _read_key(path: Path, fingerprint: Optional[str] = None) -> str:
    """The operator key file's text, refused as the nodes would refuse it with ``fingerprint``.

    A file of several keys without a pin, or a pin the file does not hold, would fail every node's
    install (``Keyring.open_signer``): say so here, once, before the manifests go out.
    """
    check_key_file(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the operator key {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN PGP PUBLIC KEY BLOCK-----" not in data:
        raise UsageError(f"{path} is not an armored public key (gpg --armor --export KEY > {path.name})")
    Keyring.open_signer(path, fingerprint=fingerprint).close()
    return data.decode("ascii", errors="replace")


fleet_app.command("k8s")(k8s_command)
fleet_app.command("image")(image_command)
