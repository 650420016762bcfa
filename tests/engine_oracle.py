"""NVIDIA's ``nvidia-ctk runtime configure`` as an oracle, and the engines' own reading of a config ("effective").

- :func:`nvidia_ctk` extracts the real ``nvidia-ctk`` from NVIDIA's ``-base`` .deb (``dpkg-deb -x``) into a
  cache once; :func:`run_nvidia_ctk` runs its ``--dry-run`` and splits what it prints into the files it
  would write (for a drop-in it prints the drop-in after "Drop-in config:" and the top-level config after
  "Top-level config:", each label on stderr: both streams go to one pipe so the order is kept).
- :func:`containerd_effective` asks containerd itself: ``containerd --config F config dump`` with every
  ``imports`` entry pointed under the test root, Debian's containerd 1.6 for config version 1 and 2 and
  containerd 2.1.5 (``tests/data/tools``, checked against its SHA256SUMS, decompressed once into the cache)
  for version 3. containerd 1.6 predates CDI, so for version 1 and 2 files CDI enablement is what 2.1.5
  reads from them over containerd 1.7's default (off).
- :func:`docker_effective` is daemon.json as dockerd reads it (it has no drop-ins);
  :func:`crio_effective` merges crio.conf and then ``crio.conf.d`` in lexical order, table by table, as
  CRI-O does.

Each returns an :class:`Effective`: the runtime's settings, the default runtime and CDI enablement.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import tomlkit
import tomllib

from tests.upstream.prebuilt import NVIDIA_BUILD, checked_build, require_artifact, sums_problem

CACHE = Path(os.environ.get("GPU_AIRGAP_TEST_CACHE") or Path.home() / ".cache" / "gpu-airgap-tests")
BASE_DEB = NVIDIA_BUILD / "deb/amd64/nvidia-container-toolkit-base_1.20.0-1_amd64.deb"
TOOLS = Path(__file__).parent / "data" / "tools"
CONTAINERD_2 = TOOLS / "containerd-2.1.5.zst"
#: containerd's CRI runtime plugin per config version, as ``config dump`` prints it
CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


@dataclass(frozen=True)
class Effective:
    """What the engine will use, as far as the NVIDIA runtime is concerned."""

    runtime: Dict[
        str, Any
    ]  #: runtime_type / BinaryName / SystemdCgroup (containerd), path (docker), runtime_path... (crio)
    default: Optional[str]
    cdi: Optional[bool]
    error: str = ""  #: the engine refused the config (then the rest is empty)
    runtimes: Tuple[str, ...] = field(default=())


_CACHE_LOCK = threading.Lock()


def _cached(name: str, source: Path, make: Any) -> Path:
    """``make`` a directory once into the cache; threads of one process take turns, other processes race safely.

    Each maker works in its own partial directory (process and thread in the name), so nobody ever
    runs a binary another is still writing ("Text file busy"); the first rename wins and a later
    one's copy is thrown away.
    """
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    final = CACHE / name / digest
    with _CACHE_LOCK:
        if not final.exists():
            partial = CACHE / name / f"{digest}.partial-{os.getpid()}-{threading.get_ident()}"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            make(partial)
            try:
                os.rename(partial, final)  # atomic; fails when another process got there first
            except OSError:
                if not final.exists():
                    raise
                shutil.rmtree(partial, ignore_errors=True)
    return final


def nvidia_ctk() -> Path:
    """The real nvidia-ctk 1.20.0, extracted from NVIDIA's -base .deb (checked) into the cache."""
    _check_artifacts()
    home = _cached(
        "nvidia-ctk",
        BASE_DEB,
        lambda d: subprocess.run(["dpkg-deb", "-x", str(BASE_DEB), str(d)], check=True),
    )
    return home / "usr/bin/nvidia-ctk"


def containerd_2() -> Path:
    """containerd 2.1.5 (checked), decompressed once into the cache."""
    _check_artifacts()

    def make(d: Path) -> None:
        subprocess.run(["zstd", "-q", "-d", "-o", str(d / "containerd"), str(CONTAINERD_2)], check=True)
        (d / "containerd").chmod(0o755)

    return _cached("containerd-2.1.5", CONTAINERD_2, make) / "containerd"


@functools.cache
def _check_artifacts() -> None:
    """NVIDIA's packages and containerd 2.1.5 match their SHA256SUMS (once per process).

    :raises FileNotFoundError: one is missing or changed: they are in the repository, so the tests fail.
    """
    checked_build()
    require_artifact(sums_problem(TOOLS / "SHA256SUMS", what="containerd 2.1.5"))


def oracle_missing() -> str:
    """Why this machine cannot run the oracle (a system tool is missing), or "".

    NVIDIA's packages and containerd 2.1.5 are not asked about here: they are part of the repository,
    and :func:`nvidia_ctk` / :func:`containerd_2` fail loudly when they are missing or changed.
    """
    for tool in ("containerd", "dpkg-deb", "zstd"):
        if shutil.which(tool) is None:
            return f"the nvidia-ctk oracle needs {tool} (make sysdeps installs it)"
    return ""


def run_nvidia_ctk(runtime: str, config: Path, flags: List[str]) -> Tuple[int, Dict[str, str], str]:
    """``nvidia-ctk runtime configure --runtime=R --config=FILE --dry-run FLAGS``.

    :returns: exit code, the texts it would write and its log. The texts are ``{"drop-in": ...,
        "top-level": ...}`` for a containerd drop-in, ``{"drop-in": ...}`` for a CRI-O drop-in (it
        leaves crio.conf alone) and ``{"config": ...}`` when it edits the file in place.
    """
    argv = [
        str(nvidia_ctk()),
        "runtime",
        "configure",
        f"--runtime={runtime}",
        f"--config={config}",
        "--dry-run",
        *flags,
    ]
    done = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=60
    )
    parts: Dict[str, List[str]] = {"config": []}
    current = "config"
    log: List[str] = []
    for line in done.stdout.splitlines(keepends=True):
        if line.startswith("time=") and " level=" in line:
            log.append(line)
            if 'msg="Drop-in config:"' in line:
                current = "drop-in"
            elif 'msg="Top-level config:"' in line:
                current = "top-level"
            parts.setdefault(current, [])
            continue
        parts[current].append(line)
    texts = {k: "".join(v) for k, v in parts.items() if k != "config" or "drop-in" not in parts}
    if runtime == "crio" and "--drop-in-config=" not in flags:
        texts = {"drop-in": texts.pop("config", "")}
    return done.returncode, texts, "".join(log)


def _retarget_imports(path: Path, root: Path, seen: set[Path]) -> None:
    """Point every absolute ``imports`` entry of ``path`` (and of the files it imports) under ``root``."""
    if path in seen or not path.is_file():
        return
    seen.add(path)
    try:
        doc = tomlkit.parse(path.read_text())
    except Exception:
        return  # containerd will say what is wrong with it
    imports = doc.get("imports")
    if not imports:
        return
    moved = [
        str(root) + item if item.startswith("/") and not item.startswith(str(root)) else item
        for item in imports
    ]
    doc["imports"] = moved
    path.write_text(tomlkit.dumps(doc))
    for pattern in moved:
        for match in sorted(glob.glob(pattern)):
            _retarget_imports(Path(match), root, seen)


#: tree digest -> containerd's reading of it: both tools often leave identical trees (and containerd
#: gives the same answer for the same bytes), so each distinct tree is dumped once per session.
_READ: Dict[str, Effective] = {}


def _tree_digest(root: Path, node_path: str) -> str:
    digest = hashlib.sha256(node_path.encode())
    state = root / "var/lib/gpu-airgap"  # gpu-airgap's journal and backups: containerd never reads them
    for path in sorted(p for p in root.rglob("*") if p.is_file() and state not in p.parents):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def containerd_effective(root: Path, node_path: str) -> Effective:
    """containerd's own view of ``root/node_path`` and its imports (``config dump``)."""
    key = _tree_digest(root, node_path)
    if key not in _READ:
        _READ[key] = _containerd_effective(root, node_path)
    return _READ[key]


def _containerd_effective(root: Path, node_path: str) -> Effective:
    config = root / node_path.lstrip("/")
    if not config.is_file():
        return Effective({}, None, None, error="no config file")
    text = config.read_text()
    try:
        version = int(tomllib.loads(text).get("version", 1))
    except tomllib.TOMLDecodeError as exc:
        return Effective({}, None, None, error=f"not TOML: {exc}")
    _retarget_imports(config, root, set())
    dump = _dump(str(containerd_2()) if version >= 3 else "containerd", config)
    if isinstance(dump, str):
        return Effective({}, None, None, error=dump)
    cri = dump.get("plugins", {}).get(CRI_PLUGIN[3 if version >= 3 else 2], {})
    cdi = cri.get("enable_cdi")
    if version < 3:
        cdi = _cdi_of_old_config(config)
    runtimes = cri.get("containerd", {}).get("runtimes", {})
    nvidia = runtimes.get("nvidia", {})
    options = nvidia.get("options", {}) or {}
    runtime = (
        {
            "runtime_type": nvidia.get("runtime_type"),
            "BinaryName": options.get("BinaryName"),
            "SystemdCgroup": options.get("SystemdCgroup"),
        }
        if nvidia
        else {}
    )
    return Effective(
        runtime,
        cri.get("containerd", {}).get("default_runtime_name"),
        bool(cdi),
        runtimes=tuple(sorted(runtimes)),
    )


def _cdi_of_old_config(config: Path) -> Optional[bool]:
    """Whether a version 1/2 config enables CDI where containerd reads it.

    containerd 1.6 has no CDI (``enable_cdi`` came with 1.7, default off; 2.x turns it on by
    default). So containerd 2.1.5, which migrates version 1/2 files, reads a wrapper that sets 1.7's
    default and imports the node's config: only a key the node's files really set turns it on.
    """
    wrapper = config.with_name(f".cdi-probe-{os.getpid()}.toml")
    wrapper.write_text(
        f'version = 2\nimports = ["{config}"]\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n'
    )
    try:
        dump = _dump(str(containerd_2()), wrapper)
    finally:
        wrapper.unlink()
    return (
        dump.get("plugins", {}).get(CRI_PLUGIN[3], {}).get("enable_cdi") if isinstance(dump, dict) else None
    )


def _dump(binary: str, config: Path) -> Dict[str, Any] | str:
    """``containerd --config FILE config dump`` parsed, or the line saying why containerd refused it."""
    done = subprocess.run(
        [binary, "--config", str(config), "config", "dump"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "config dump failed"
    return tomllib.loads(done.stdout)


def docker_effective(root: Path, node_path: str = "/etc/docker/daemon.json") -> Effective:
    """daemon.json as dockerd reads it."""
    path = root / node_path.lstrip("/")
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        return Effective({}, None, None, error=f"not JSON: {exc}")
    nvidia = data.get("runtimes", {}).get("nvidia")
    runtime = {"path": nvidia.get("path"), "runtimeArgs": nvidia.get("runtimeArgs")} if nvidia else {}
    return Effective(
        runtime,
        data.get("default-runtime"),
        bool(data.get("features", {}).get("cdi", False)),
        runtimes=tuple(sorted(data.get("runtimes", {}))),
    )


def _merge(into: Dict[str, Any], update: Dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def crio_effective(
    root: Path, main: str = "/etc/crio/crio.conf", drop_ins: str = "/etc/crio/crio.conf.d"
) -> Effective:
    """crio.conf, then every file of crio.conf.d in lexical order, merged table by table."""
    merged: Dict[str, Any] = {}
    files = [root / main.lstrip("/")]
    directory = root / drop_ins.lstrip("/")
    files += sorted(directory.iterdir()) if directory.is_dir() else []
    for path in files:
        if path.is_file():
            try:
                _merge(merged, tomllib.loads(path.read_text()))
            except tomllib.TOMLDecodeError as exc:
                return Effective({}, None, None, error=f"{path.name} is not TOML: {exc}")
    runtime_table = merged.get("crio", {}).get("runtime", {})
    runtimes = runtime_table.get("runtimes", {})
    nvidia = runtimes.get("nvidia", {})
    runtime = (
        {k: nvidia.get(k) for k in ("runtime_path", "runtime_type", "monitor_path", "runtime_root")}
        if nvidia
        else {}
    )
    # CRI-O reads CDI specs unless cdi_spec_dirs is emptied; nvidia-ctk has nothing to enable for it.
    return Effective(runtime, runtime_table.get("default_runtime"), None, runtimes=tuple(sorted(runtimes)))
