"""gpu-airgap's DaemonSet container: install the toolkit on the host, restart the engine, report ready.

Rendered into a ConfigMap by ``gpu-airgap fleet k8s`` and run by python3 (>= 3.9, stdlib only):
with ``--tools host`` (the default) the host's own python3, under ``chroot /host`` with
$GPU_AIRGAP_HOST_ROOT=/, so the node's own gpg, tar, dpkg/rpm and systemctl do the work; with
``--tools image`` the image's python3, with the host's / at $GPU_AIRGAP_HOST_ROOT=/host. It:

1. reads the bundle ($GPU_AIRGAP_BUNDLE_FILE: fetched or copied by the ``--tools host`` wrapper, or
   the mounted ConfigMap), or fetches $GPU_AIRGAP_BUNDLE_URL with urllib into the host's
   /var/cache/gpu-airgap/k8s (``--tools image``), or pulls $GPU_AIRGAP_BUNDLE_REF
   (oci://HOST/REPO@sha256:…) from the registry by digest: the manifest must hash to that digest and
   the bundle blob to the digest the manifest names (of a split bundle, only its signed checksum
   list and first part: see pull_bundle). A file bundle must hash to
   $GPU_AIRGAP_BUNDLE_DIGEST, the digest in the pod template: an old bundle left behind a URL is
   refused, not installed under a new template;
2. takes gpu-airgap-node.pyz out of it with tar and, before running it, checks it with gpgv (or
   gpg) against the operator key: the bundle's ``NODE-SHA256SUMS`` must carry a good signature by
   that key and list the tool's sha256 (this program, from the operator's ConfigMap, is the trust
   anchor; nothing from the bundle runs before this check). Then it runs ``install BUNDLE --keyring
   KEY --root ROOT --json`` (the installer verifies the whole bundle against the operator key first;
   for a split bundle ``install oci://…@sha256:…``, so the node tool pulls the parts itself);
3. restarts each engine the install changed: under ``--tools host`` the installer does it (the live
   root: it also retries engines an earlier pod left unrestarted, and puts back the configuration of
   one that does not come back); under ``--tools image`` (``--no-restart``) this program runs
   ``chroot /host systemctl restart UNIT`` (the pod has hostPID, so systemctl sees the host's systemd
   and does not take the chroot for a container) and checks it is active;
4. writes the ready marker (the install's result and the bundle digest) the readinessProbe looks
   for, then sleeps until the pod is stopped: one idle python3 (a few MiB, no CPU) per node keeps
   the DaemonSet's rolling update, and nodes that join later, working without a controller.

SIGTERM during steps 1-3 waits for the install to finish (dpkg must not be killed mid-unpack).

``ready`` (the probe) checks the marker names the template's bundle digest, and asks ``status --root
/host --json`` whether the node's recorded install is that bundle's and the runtime is registered. Any failure exits non-zero with the installer's one-sentence error, so the pod restarts
with back-off and the DaemonSet's rolling update (maxUnavailable 1) does not go on to the next node.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any, Dict, Iterator, List, NoReturn, Optional, Union

#: what the node takes out of the bundle first and checks (installer/nodecheck.py, mirrored here:
#: this program runs on the node's python3 with the standard library only)
NODE_SUMS = "NODE-SHA256SUMS"
NODE_SUMS_SIGNATURE = "NODE-SHA256SUMS.asc"
NODE_TOOL = "gpu-airgap-node.pyz"
HEAD = (NODE_SUMS, NODE_SUMS_SIGNATURE, "install.sh", NODE_TOOL)
VERIFICATION_FAILED = (
    3  #: the exit code of a signature or checksum that did not match (docs/reference.md, "Exit codes")
)
#: the bundle artifact's manifest and layer types (installer/oci/artifact.py, mirrored here)
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_BUNDLE_LAYER = "application/vnd.gpu-airgap.bundle.v1.tar"
OCI_PART_LAYER = "application/vnd.gpu-airgap.bundle.part.v1"
OCI_SUMS_LAYER = "application/vnd.gpu-airgap.bundle.sha256sums.v1"
OCI_SUMS_SIGNATURE_LAYER = "application/vnd.gpu-airgap.bundle.sha256sums.signature.v1"
MAX_MANIFEST = 4 << 20
#: how the node's first check decides from gpgv's status lines, not its exit status (which is 2 when a
#: second signature is by a key the node lacks: a bundle the old and the new operator key both signed);
#: installer/nodecheck.py, mirrored here: refused on a bad signature or one by an expired or revoked
#: key, good with a SHA-2 signature whose primary-key fingerprint is the pinned one (any key of the file
#: when $GPU_AIRGAP_FINGERPRINT is empty)
GPGV_OPTIONS = "--weak-digest SHA1 --status-fd 1"
REFUSING_STATUS = r"^\[GNUPG:\] (BADSIG|EXPKEYSIG|REVKEYSIG) "
GOOD_SIGNATURE = r"^\[GNUPG:\] VALIDSIG ([^ ]+ ){7}(8|9|1[0-24]) [^ ]+ "
ANY_KEY = "[0-9A-F]{40}"
RECHECK = 300  #: seconds between the readiness probe's full checks (``status``)


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def _host() -> Path:
    return Path(_env("GPU_AIRGAP_HOST_ROOT", "/host"))


def _cache() -> Path:
    return (
        Path(_env("GPU_AIRGAP_CACHE")) if _env("GPU_AIRGAP_CACHE") else _host() / "var/cache/gpu-airgap/k8s"
    )


def _ready_marker() -> Path:
    return Path(_env("GPU_AIRGAP_READY_FILE", "/tmp/gpu-airgap-ready"))


def _say(line: str) -> None:
    sys.stderr.write(f"gpu-airgap-k8s: {line}\n")
    sys.stderr.flush()


def fetch_bundle(url: str, dest: Path) -> None:
    """Download ``url`` to ``dest`` through a temp file (the installer verifies it, not this)."""
    part = dest.with_name(dest.name + ".part")
    try:
        with (
            urllib.request.urlopen(url, timeout=60) as response,
            open(part, "wb") as out,
        ):  # http(s) only: the renderer checks
            shutil.copyfileobj(response, out, 1 << 20)
    except OSError as exc:  # URLError and HTTPError are OSErrors
        reason = getattr(exc, "reason", None) or exc
        raise SystemExit(f"gpu-airgap-k8s: could not fetch the bundle from {url}: {reason}") from exc
    os.replace(part, dest)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


class Registry:
    """Just enough of the distribution API to pull one blob by digest: anonymous, basic or bearer auth."""

    def __init__(self, host: str, repository: str) -> None:
        scheme = "http" if _env("GPU_AIRGAP_REGISTRY_PLAIN_HTTP") == "true" else "https"
        self.base, self.host, self.repository = f"{scheme}://{host}", host, repository
        # the registry's CA (--registry-ca) on top of the node's: containerd's certs.d is not the system store
        ca = _env("GPU_AIRGAP_REGISTRY_CA")
        self.tls = ssl.create_default_context(cafile=ca) if ca and scheme == "https" else None
        self.auth: Optional[str] = None
        self.basic = self._basic(host)

    @staticmethod
    def _basic(host: str) -> Optional[str]:
        """``auths[HOST].auth`` of the mounted docker config (the --registry-secret), if any."""
        config = Path(_env("GPU_AIRGAP_REGISTRY_CONFIG", "/nonexistent"))
        if not config.is_file():
            return None
        entry = (json.loads(config.read_text("utf-8")).get("auths") or {}).get(host) or {}
        if entry.get("auth"):
            return "Basic " + str(entry["auth"])
        if entry.get("username"):
            return "Basic " + b64encode(f"{entry['username']}:{entry.get('password', '')}".encode()).decode()
        return None

    def open(self, path: str, accept: str = "") -> Any:
        """GET ``/v2/REPO/PATH``; a 401 is answered once with basic credentials or a bearer token."""
        for attempt in (1, 2):
            request = urllib.request.Request(f"{self.base}/v2/{self.repository}/{path}")
            if accept:
                request.add_header("Accept", accept)
            if self.auth:
                request.add_unredirected_header("Authorization", self.auth)  # never sent on to blob storage
            try:
                return urllib.request.urlopen(request, timeout=60, context=self.tls)
            except urllib.error.HTTPError as exc:
                if exc.code != 401 or attempt == 2:
                    raise
                self.auth = self._answer(exc.headers.get("WWW-Authenticate", ""))
        raise AssertionError("unreachable")

    def _answer(self, challenge: str) -> Optional[str]:
        scheme, _, rest = challenge.partition(" ")
        if scheme.lower() == "basic":
            return self.basic
        params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        query.setdefault("scope", f"repository:{self.repository}:pull")
        token_request = urllib.request.Request(params.get("realm", "") + "?" + urllib.parse.urlencode(query))
        if self.basic:
            token_request.add_header("Authorization", self.basic)
        with urllib.request.urlopen(token_request, timeout=60, context=self.tls) as answer:
            body = json.loads(answer.read(1 << 20))
        return "Bearer " + str(body.get("token") or body.get("access_token"))


def pull_bundle(ref: str, dest: Path, key: Path) -> bool:
    """Pull the pinned artifact ``ref`` by digest into ``dest``; True for a split bundle.

    A whole bundle is its one layer, checked against its digest. Of a split bundle only what the node
    tool needs is pulled here: the checksum list and its signature (checked against the operator key
    before any part is trusted), then the first part (its layer digest and its signed sha256), which
    holds the node check whole (``bundle build --split`` sees to that). The node tool, once checked,
    pulls every part itself with ``install oci://`` (installer/oci/: each part checked by digest,
    the signature verified before anything is installed): one registry client, not two.
    """
    match = re.match(r"^oci://([^/]+)/(.+)@(sha256:[0-9a-f]{64})$", ref)
    if not match:
        raise SystemExit(f"gpu-airgap-k8s: {ref} is not a pinned reference oci://HOST/REPO@sha256:…")
    host, repository, digest = match.groups()
    try:
        registry = Registry(host, repository)  # reads the registry secret and CA: a bad one is a sentence too
        with registry.open(f"manifests/{digest}", OCI_MANIFEST) as answer:
            manifest = answer.read(MAX_MANIFEST + 1)
        if "sha256:" + hashlib.sha256(manifest).hexdigest() != digest:
            _refuse(f"the registry's manifest for {ref} does not match its digest; refusing it")
        layers: List[Dict[str, Any]] = json.loads(manifest).get("layers") or []
        types = [str(layer.get("mediaType", "")) for layer in layers]
        if len(layers) == 1 and types[0].startswith(OCI_BUNDLE_LAYER):
            _pull_blob(registry, ref, layers[0], dest)
            return False
        if (
            len(layers) < 3
            or types[-2:] != [OCI_SUMS_LAYER, OCI_SUMS_SIGNATURE_LAYER]
            or set(types[:-2]) != {OCI_PART_LAYER}
        ):
            raise SystemExit(
                f"gpu-airgap-k8s: {ref} is not a gpu-airgap bundle (one bundle layer, or parts and their signed checksum list)"
            )
        _first_part(registry, ref, layers, dest, key)
        return True
    except (OSError, ValueError, AttributeError) as exc:  # URLError, HTTPError, a JSON body that is not
        raise SystemExit(
            f"gpu-airgap-k8s: could not pull {ref}: {getattr(exc, 'reason', None) or exc}"
        ) from exc


def _pull_blob(registry: Registry, ref: str, layer: Dict[str, Any], dest: Path) -> None:
    """``dest``: the blob ``layer`` names, only if it matches that digest and size (exit 3 otherwise)."""
    part = dest.with_name(dest.name + ".part")
    with registry.open(f"blobs/{layer['digest']}") as answer, open(part, "wb") as out:
        shutil.copyfileobj(answer, out, 1 << 20)
    if _sha256_file(part) != layer["digest"] or part.stat().st_size != layer.get("size"):
        part.unlink()
        _refuse(f"the registry sent a bundle for {ref} that does not match its digest; refusing it")
    os.replace(part, dest)


def _first_part(registry: Registry, ref: str, layers: List[Dict[str, Any]], dest: Path, key: Path) -> None:
    """The first part of a split bundle at ``dest``, checked against its operator-signed checksum list."""
    work = Path(tempfile.mkdtemp(prefix=".split-", dir=str(dest.parent)))
    try:
        sums, signature = work / "sha256sums", work / "sha256sums.asc"
        _pull_blob(registry, ref, layers[-2], sums)
        _pull_blob(registry, ref, layers[-1], signature)
        if not _signed_by(_dearmored(key, work), signature, sums, work):
            _refuse(
                f"the checksum list of the split bundle {ref} is not signed by the operator key {_operator_key(key)}; refusing it"
            )
        _pull_blob(registry, ref, layers[0], work / "part")
        title = str((layers[0].get("annotations") or {}).get("org.opencontainers.image.title", ""))
        if "sha256:" + _listed(sums).get(title, "") != _sha256_file(work / "part"):
            _refuse(
                f"the first part of the split bundle {ref} does not match its signed checksum list; refusing it"
            )
        os.replace(work / "part", dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _refuse(message: str) -> NoReturn:
    _say(message)
    raise SystemExit(VERIFICATION_FAILED)


def _signed_by(keyring: Path, signature: Path, data: Path, home: Path) -> bool:
    """A good detached signature by the operator key (``keyring``, binary; the pinned key of it): gpgv, else gpg."""
    if shutil.which("gpgv"):
        argv = ["gpgv", "--homedir", str(home), *GPGV_OPTIONS.split(), "--keyring", str(keyring)]
    else:
        argv = ["gpg", "--batch", "--homedir", str(home), *GPGV_OPTIONS.split(), "--no-default-keyring"]
        argv += ["--keyring", str(keyring), "--verify"]
    status = subprocess.run(
        [*argv, str(signature), str(data)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False
    ).stdout.decode("ascii", "replace")
    signer = re.escape(_pinned()) if _pinned() else ANY_KEY
    return not re.search(REFUSING_STATUS, status, re.M) and bool(
        re.search(GOOD_SIGNATURE + signer + "$", status, re.M)
    )


def _pinned() -> str:
    """$GPU_AIRGAP_FINGERPRINT (``fleet k8s --fingerprint``, checked there), upper case; empty: not pinned."""
    return _env("GPU_AIRGAP_FINGERPRINT").replace(" ", "").upper()


def _operator_key(key: Path) -> str:
    """How refusals name the trusted key: the file, and the pinned fingerprint when there is one."""
    return f"{_pinned()} of {key}" if _pinned() else str(key)


def _dearmored(key: Path, work: Path) -> Path:
    """The operator key as a binary keyring in ``work`` (gpgv reads no other)."""
    keyring = work / "operator.gpg"
    dearmor = ["gpg", "--batch", "--quiet", "--homedir", str(work), "--dearmor", "-o", str(keyring), str(key)]
    if subprocess.run(dearmor, stderr=subprocess.DEVNULL, check=False).returncode != 0:
        _refuse(f"the operator key {key} is not an OpenPGP public key")
    return keyring


def _listed(sums: Path) -> Dict[str, str]:
    """Name -> sha256 of a NODE-SHA256SUMS whose signature checked out (``sha256sum`` lines)."""
    lines = (
        re.match(r"^([0-9a-f]{64}) [ *](\S+)$", line)
        for line in sums.read_text("ascii", "replace").splitlines()
    )
    return {m.group(2): m.group(1) for m in lines if m}


def node_tool(bundle: Path, dest: Path, key: Path) -> None:
    """Take gpu-airgap-node.pyz out of the bundle with tar and place it at ``dest`` only once it checked out.

    GNU tar detects zstd, xz and gzip and, with --occurrence, stops once it has the node check. The
    signature over NODE-SHA256SUMS is checked by the node's gpgv (or gpg) against the operator key
    (dearmored first: gpgv reads binary keyrings only); only then are its lines read and the tool's
    sha256 compared. Any failure exits with VERIFICATION_FAILED and the tool never runs.
    """
    if dest.exists():
        dest.unlink()  # an earlier pod's copy: only a tool this run checked may be left here
    work = Path(tempfile.mkdtemp(prefix=".verify-", dir=str(dest.parent)))
    try:
        taken = subprocess.run(
            ["tar", "--occurrence", "-xf", str(bundle), "-C", str(work), *HEAD],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        if taken.returncode != 0:
            _refuse(
                f"{bundle} has no {', '.join(HEAD)} to check the node tool with (not a gpu-airgap bundle, "
                "or one an older gpu-airgap built: rebuild it); refusing to run anything from it"
            )
        if not _signed_by(_dearmored(key, work), work / NODE_SUMS_SIGNATURE, work / NODE_SUMS, work):
            _refuse(
                f"the node tool in {bundle} is not signed by the operator key {_operator_key(key)} ({NODE_SUMS_SIGNATURE}); refusing to run it"
            )
        with open(work / NODE_TOOL, "rb") as tool:
            actual = hashlib.sha256(tool.read()).hexdigest()
        if _listed(work / NODE_SUMS).get(NODE_TOOL) != actual:
            _refuse(f"the node tool in {bundle} does not match its signed {NODE_SUMS}; refusing to run it")
        os.replace(work / NODE_TOOL, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _on_host() -> bool:
    """``--tools host``: running inside the node's root, where the installer restarts engines itself."""
    return _host() == Path("/")


def _registry_flags() -> List[str]:
    """``install oci://``'s options for the registry this program pulls from."""
    flags = ["--plain-http"] if _env("GPU_AIRGAP_REGISTRY_PLAIN_HTTP") == "true" else []
    return flags + (["--ca-file", _env("GPU_AIRGAP_REGISTRY_CA")] if _env("GPU_AIRGAP_REGISTRY_CA") else [])


@contextlib.contextmanager
def _registry_env(cache: Path) -> Iterator[Dict[str, str]]:
    """The node tool's environment for ``install oci://``: the registry secret as its Docker config, the
    spool on the host's disk (the cache) rather than a container's or a tmpfs."""
    work = Path(tempfile.mkdtemp(prefix=".docker-", dir=str(cache)))  # 0700
    try:
        config = Path(_env("GPU_AIRGAP_REGISTRY_CONFIG", "/nonexistent"))
        if config.is_file():
            (work / "config.json").symlink_to(config.resolve())  # a link: no second copy of the credentials
        yield {**os.environ, "DOCKER_CONFIG": str(work), "TMPDIR": str(cache)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def install_argv(tool: Path, bundle: Union[Path, str]) -> List[str]:
    """The installer's command line from the DaemonSet's environment."""
    argv = [
        sys.executable,
        "-I",
        "-S",
        str(tool),
        "install",
        str(bundle),
        "--keyring",
        _env("GPU_AIRGAP_KEYRING"),
        "--root",
        str(_host()),
        "--runtime",
        _env("GPU_AIRGAP_RUNTIME", "auto"),
        "--runtime-name",
        _env("GPU_AIRGAP_RUNTIME_NAME", "nvidia"),
        "--cdi",
        _env("GPU_AIRGAP_CDI", "auto"),
        "--json",
    ]
    if not _on_host() or _env("GPU_AIRGAP_RESTART", "systemd") == "none":
        argv.append("--no-restart")
    if _pinned():  # the one key of the file to trust (fleet k8s --fingerprint)
        argv += ["--fingerprint", _pinned()]
    if _env("GPU_AIRGAP_SET_AS_DEFAULT") == "true":
        argv.append("--set-as-default")
    if _env("GPU_AIRGAP_HOLD") == "true":  # the rollout is the operator's say-so to move the held nodes on
        argv += ["--hold", "--allow-held"]
    if _env("GPU_AIRGAP_DISTRO"):  # the nodes' containerd, named in `fleet k8s --distro`
        argv += ["--distro", _env("GPU_AIRGAP_DISTRO")]
    if _env("GPU_AIRGAP_TAKE_OVER") == "true":
        argv.append("--force")  # take the runtime configuration over from the GPU Operator
    return argv


def restart(units: Dict[str, List[str]]) -> None:
    """Restart the changed engines' units on the host and check each came back ($GPU_AIRGAP_RESTART=none: skip).

    ``units``: engine -> the units the installer says may run it (k3s or k3s-agent, ...): the one
    that runs is restarted; none for k0s, which reloads containerd by itself.
    """
    if _env("GPU_AIRGAP_RESTART", "systemd") == "none":
        if units:
            _say(f"not restarting {', '.join(units)} (GPU_AIRGAP_RESTART=none)")
        return
    enter = ["chroot", str(_host())]  # --tools image: the host's systemctl
    for engine, candidates in units.items():
        if not candidates:
            _say(f"{engine}: reloads its configuration by itself")
            continue
        running = [
            u
            for u in candidates
            if subprocess.run([*enter, "systemctl", "is-active", "--quiet", u], check=False).returncode == 0
        ]
        unit = (running or candidates)[0]
        subprocess.run([*enter, "systemctl", "restart", unit], check=False)
        active = subprocess.run([*enter, "systemctl", "is-active", "--quiet", unit], check=False)
        if active.returncode != 0:
            raise SystemExit(
                f"gpu-airgap-k8s: {unit} did not come back after registering the runtime; see journalctl -u {unit} on the node"
            )
        _say(f"restarted {unit}")


def install() -> int:
    """Steps 1-4 of the module docstring."""
    cache = _cache()
    cache.mkdir(parents=True, exist_ok=True)
    marker = _ready_marker()
    for stale in (marker, _checked_mark()):
        if stale.exists():
            stale.unlink()  # under --tools host they live on the node and outlive the pod: not ready until this run says so
    url, ref, expected = (
        _env("GPU_AIRGAP_BUNDLE_URL"),
        _env("GPU_AIRGAP_BUNDLE_REF"),
        _env("GPU_AIRGAP_BUNDLE_DIGEST"),
    )
    bundle = cache / "bundle" if url or ref else Path(_env("GPU_AIRGAP_BUNDLE_FILE"))
    split = False
    if ref:
        _say(f"pulling {ref}")
        split = pull_bundle(ref, bundle, Path(_env("GPU_AIRGAP_KEYRING")))
    elif url:
        _say(f"fetching {url}")
        fetch_bundle(url, bundle)
    elif not bundle.is_file():
        raise SystemExit(
            f"gpu-airgap-k8s: there is no bundle at {bundle}; check the DaemonSet's bundle ConfigMap"
        )
    if expected and not ref and _sha256_file(bundle) != expected:
        _refuse(
            f"the bundle from {url or bundle} is not the one the DaemonSet names ({expected}); refusing it"
        )
    tool = cache / NODE_TOOL
    node_tool(bundle, tool, Path(_env("GPU_AIRGAP_KEYRING")))
    if split:  # the checked node tool pulls every part by digest itself (pull_bundle)
        _say(f"{ref} is a split bundle: the node tool pulls its parts")
        with _registry_env(cache) as env:
            proc = subprocess.run(
                [*install_argv(tool, ref), *_registry_flags()], stdout=subprocess.PIPE, env=env, check=False
            )
    else:
        proc = subprocess.run(install_argv(tool, bundle), stdout=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        return proc.returncode  # the installer said why on stderr
    result: Dict[str, Any] = json.loads(proc.stdout)
    engines: Dict[str, str] = result.get("engines") or {}
    _say(f"{result.get('outcome')}: {result.get('target')} on {result.get('node')}")
    if not _on_host():  # --tools host: the installer restarted them (and said so in the result)
        units: Dict[str, List[str]] = result.get("restart_units") or {}
        restart(
            {
                name: units.get(name, [name])
                for name in units
                or [n for n, what in engines.items() if what.startswith("registered runtime")]
            }
        )
    _ready_marker().write_text(json.dumps({**result, "bundle_digest": expected}) + "\n")
    return 0


def _checked_mark() -> Path:
    return _ready_marker().with_name(_ready_marker().name + ".checked")


def ready() -> int:
    """The readinessProbe: installed by this pod, and the runtime registered with an engine (or --runtime none).

    The probe runs every few seconds so that a rollout moves on as soon as a node is done; the full
    check (the node tool's ``status``, another python3 start) runs at most every RECHECK seconds, and
    in between the probe only reads the marker, so an idle node pays almost nothing for it.
    """
    if not _ready_marker().exists():
        return 1
    done = json.loads(_ready_marker().read_text())
    if done.get("bundle_digest") != _env("GPU_AIRGAP_BUNDLE_DIGEST"):
        return 1  # installed by a pod of another template (another bundle)
    mark = _checked_mark()
    if mark.exists() and 0 <= time.time() - mark.stat().st_mtime < RECHECK:
        return 0
    if mark.exists():
        mark.unlink()
    if _full_check(done) != 0:
        return 1
    mark.touch()
    return 0


def _full_check(done: Dict[str, Any]) -> int:
    tool = _cache() / NODE_TOOL
    name = _env("GPU_AIRGAP_RUNTIME_NAME", "nvidia")
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(tool),
            "status",
            "--root",
            str(_host()),
            "--runtime-name",
            name,
            "--json",
        ],
        stdout=subprocess.PIPE,
        check=False,
    )
    if proc.returncode not in (0, 9):  # 9: drift, reported but still a status
        return 1
    report = json.loads(proc.stdout)
    if report.get("bundle_id") != done.get("bundle_id"):
        return 1  # the node's recorded install is not the bundle this pod installed
    if _env("GPU_AIRGAP_RUNTIME") == "none":
        return 0 if report.get("installed_by_gpu_airgap") else 1
    engines = report.get("engines") or {}
    # snake_case keys since the tool's --json has one style; RUNTIME from a bundle of an older tool
    return 0 if any(name in (facts.get("runtime"), facts.get("RUNTIME")) for facts in engines.values()) else 1


def main(argv: List[str]) -> int:
    if argv[1:] == ["ready"]:
        return ready()
    stopping: List[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))  # finish the install, then stop
    code = install()
    if code != 0 or _env("GPU_AIRGAP_ONESHOT") == "true" or stopping:
        return code
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
