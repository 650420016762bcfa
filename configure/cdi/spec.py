"""CDI (Container Device Interface) specs for NVIDIA GPUs: generate, validate, keep.

Where the spec comes from:

- ``--root /`` with ``nvidia-ctk`` on PATH: ``nvidia-ctk cdi generate --output=<temp>.yaml``, which
  asks NVML for the GPUs and adds the driver libraries; its output is validated and then written
  by us (journaled backup, atomic) like every other file.
- any other ``--root``: binaries under the root are **never executed**. They may be built for
  another architecture or distribution, running them would trust whatever the tree contains, and
  nvidia-ctk would describe the *host's* GPUs and driver, not the root's. The spec is then built
  from the device nodes found under the root, as it is on ``/`` without nvidia-ctk (or when it fails).

A device-node spec has one device per GPU index (``/dev/nvidiaN``) plus ``all``, with the control
nodes (``nvidiactl``, ``nvidia-uvm``, ``nvidia-uvm-tools``, ``nvidia-modeset``) in the top-level
``containerEdits``. It mounts no driver libraries, so containers need them in the image or the
runtime's legacy mode; nvidia-ctk on the node does better. Files are accepted as stand-ins for
device nodes (tests, image roots), so only existence is checked.

An existing spec is validated first (:func:`validate_spec`). A valid one is never replaced without
``--force`` (a second run that would write the same content says "already configured"). An
invalid one is an error that lists every problem, and is replaced only with ``--force``: the
runtime silently skips broken specs, so overwriting one unasked could hide a problem someone is
debugging, and keeping it unasked leaves GPUs unusable.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

import yaml

from configure.cdi.lifecycle import current_driver, driver_version, generated_for, with_header
from configure.changes import FileChange, read_optional
from configure.driverroot import HOST_DRIVER, MOUNT_OPTIONS, DriverRoot, detect_driver_root, driver_libraries
from configure.engine import ConfigPlan
from plumbing import proc
from plumbing.errors import ConfigFormatError, ToolError, UsageError
from plumbing.fsutil import is_live_root, rooted

CDI_SPEC = "/etc/cdi/nvidia.yaml"
KIND = "nvidia.com/gpu"
ENGINE = "cdi"
#: cdiVersion values the container-device-interface library accepts
KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0")
#: hostPath on device nodes and names starting with a digit both need 0.5.0
SPEC_VERSION = "0.5.0"
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")

_DEVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.:-]*$")
_VENDOR = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?$")
_CLASS = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?$")
_ENV = re.compile(r"^[^=]+=")
_GPU_NODE = re.compile(r"^nvidia([0-9]+)$")


class NoGpuDevices(ToolError):
    """No ``/dev/nvidiaN`` node under the root: there is nothing to describe."""

    def __init__(self, dev: Path) -> None:
        self.dev = dev
        super().__init__(
            f"no GPU device nodes (nvidia0, nvidia1, ...) found in {dev}; load the NVIDIA driver "
            "(or run nvidia-modprobe) before generating a CDI spec"
        )


class SpecGenerator(Protocol):
    """Something that produces CDI spec bytes (nvidia-ctk on the node, a fake in tests)."""

    name: str

    def generate(self) -> bytes:
        """Return the YAML of a complete spec."""
        ...


class NvidiaCtkGenerator:
    """``nvidia-ctk cdi generate``, written to a private temp file so we control the real write."""

    name = "nvidia-ctk"

    def __init__(self, binary: str, driver: DriverRoot = HOST_DRIVER) -> None:
        self.binary = binary
        self.driver = driver

    def generate(self) -> bytes:
        """Run nvidia-ctk and return the spec it wrote (with the driver root, as NVIDIA documents it)."""
        with tempfile.TemporaryDirectory(prefix="gpu-airgap-cdi.") as tmp:
            out = Path(tmp) / "nvidia.yaml"  # the extension selects YAML output
            roots = [f"--driver-root={self.driver.path}", f"--dev-root={self.driver.dev_root}"]
            proc.run(
                [
                    self.binary,
                    "cdi",
                    "generate",
                    f"--output={out}",
                    *(roots if self.driver.containerized else []),
                ],
                timeout=120,
            )
            return out.read_bytes()


def find_generator(root: Path, driver: DriverRoot = HOST_DRIVER) -> Tuple[Optional[SpecGenerator], List[str]]:
    """nvidia-ctk for ``/`` when installed; never a binary under another root (returns a warning)."""
    if is_live_root(root):
        binary = proc.which("nvidia-ctk")
        return (NvidiaCtkGenerator(binary, driver) if binary else None), []
    for candidate in ("/usr/bin/nvidia-ctk", "/usr/local/bin/nvidia-ctk"):
        if rooted(root, candidate).exists():
            return None, [
                f"{candidate} under {root} is not run (binaries under --root are never executed); "
                "the spec is built from device nodes"
            ]
    return None, []


def find_device_nodes(root: Path, dev_root: str = "/") -> Tuple[List[Tuple[int, str]], List[str]]:
    """Return ``([(index, "/dev/nvidiaN")...] sorted by index, [control node paths])`` under ``root``/``dev_root``."""
    dev = rooted(root, posixpath.join(dev_root, "dev"))
    gpus: List[Tuple[int, str]] = []
    if dev.is_dir():
        for entry in dev.iterdir():
            match = _GPU_NODE.match(entry.name)
            if match and not entry.is_dir():
                gpus.append((int(match.group(1)), f"/dev/{entry.name}"))
    control = [f"/dev/{n}" for n in CONTROL_NODES if (dev / n).exists() and not (dev / n).is_dir()]
    return sorted(gpus), control


def build_spec(
    gpus: List[Tuple[int, str]],
    control: List[str],
    dev_root: str = "/",
    libraries: Sequence[Tuple[str, str]] = (),
) -> Dict[str, Any]:
    """The CDI spec for these device nodes: one device per GPU index plus ``all``.

    ``dev_root`` prefixes each node's host path (the container path stays ``/dev/...``), and
    ``libraries`` (``(hostPath, containerPath)``, a containerized driver's) are mounted read-only,
    as ``nvidia-ctk cdi generate --driver-root --dev-root`` names them.
    """

    def node(path: str) -> Dict[str, str]:
        return {"path": path, "hostPath": posixpath.join(dev_root, path.lstrip("/"))}

    devices: List[Dict[str, Any]] = [
        {"name": str(index), "containerEdits": {"deviceNodes": [node(path)]}} for index, path in gpus
    ]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [node(path) for _, path in gpus]}})
    edits: Dict[str, Any] = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"]
    }  # keep the legacy hook from injecting too
    if control:
        edits["deviceNodes"] = [node(path) for path in control]
    if libraries:
        edits["mounts"] = [
            {"hostPath": host, "containerPath": inside, "options": list(MOUNT_OPTIONS)}
            for host, inside in libraries
        ]
    return {"cdiVersion": SPEC_VERSION, "kind": KIND, "devices": devices, "containerEdits": edits}


def render_spec(spec: Dict[str, Any], *, as_json: bool = False) -> bytes:
    """YAML (or JSON, for a ``.json`` spec file) in the spec's own key order."""
    if as_json:
        return (json.dumps(spec, indent=2) + "\n").encode()
    return yaml.safe_dump(spec, sort_keys=False, default_flow_style=False).encode()


def parse_spec(raw: bytes) -> Tuple[Any, List[str]]:
    """Load spec YAML; return ``(data, problems)`` where a syntax error is a problem, not an exception."""
    try:
        return yaml.safe_load(raw), []
    except yaml.YAMLError as exc:
        return None, [f"not valid YAML: {str(exc).splitlines()[0]}"]


def check_spec(raw: bytes) -> Tuple[Any, List[str]]:
    """Load and validate spec bytes; return ``(data, every problem)`` (none: a valid spec)."""
    data, problems = parse_spec(raw)
    return data, problems or validate_spec(data)


def validate_spec(data: Any) -> List[str]:
    """Every problem with a CDI spec for NVIDIA GPUs (an empty list means valid).

    Checks cdiVersion (present and known), kind (``vendor/class`` syntax and ``nvidia.com/gpu``),
    device names (CDI syntax, unique, at least one device) and the shape of every containerEdits.
    """
    if not isinstance(data, dict):
        return ["the spec is not a YAML mapping"]
    problems: List[str] = []
    version = data.get("cdiVersion")
    if version is None:
        problems.append("cdiVersion is missing")
    elif str(version) not in KNOWN_VERSIONS:
        problems.append(f"cdiVersion {version!r} is not a known CDI version ({', '.join(KNOWN_VERSIONS)})")
    problems.extend(_validate_kind(data.get("kind")))
    devices = data.get("devices")
    if not isinstance(devices, list) or not devices:
        problems.append("devices must be a non-empty list")
        devices = []
    seen = set()
    for i, device in enumerate(devices):
        where = f"devices[{i}]"
        if not isinstance(device, dict):
            problems.append(f"{where} is not a mapping")
            continue
        name = device.get("name")
        if not isinstance(name, str) or not _DEVICE_NAME.match(name):
            problems.append(f"{where}.name {name!r} is not a valid CDI device name")
        elif name in seen:
            problems.append(f"{where}.name {name!r} is used twice")
        seen.add(name)
        edits = device.get("containerEdits")
        if not edits:
            problems.append(f"{where}.containerEdits is missing or empty")
        else:
            problems.extend(_validate_edits(edits, f"{where}.containerEdits"))
    if data.get("containerEdits") is not None:
        problems.extend(_validate_edits(data["containerEdits"], "containerEdits"))
    return problems


def missing_host_paths(root: Path, data: Dict[str, Any]) -> List[str]:
    """Device nodes and mounts of a valid spec whose host path is missing under ``root``.

    The runtime resolves every host path when it edits a container's spec, so one missing path
    (a GPU that is gone, a driver library replaced by an upgrade) fails every container that asks
    for the device. Each path is named once, with the first place that uses it.
    """
    problems: List[str] = []
    seen = set()
    edits_list = [("containerEdits", data.get("containerEdits") or {})]
    edits_list += [
        (f"devices[{i}] ({d.get('name')})", d.get("containerEdits") or {})
        for i, d in enumerate(data.get("devices") or [])
    ]
    for where, edits in edits_list:
        for key, field_name in (("deviceNodes", "hostPath"), ("mounts", "hostPath")):
            for item in edits.get(key) or []:
                host = item.get(field_name) or item.get("path")
                if host in seen:
                    continue
                seen.add(host)
                try:
                    present = os.path.lexists(rooted(root, host))
                except ToolError:  # a path that climbs out of the root names nothing on the node
                    present = False
                if not present:
                    problems.append(f"{where}.{key}: {host} does not exist on the node")
    return problems


def _validate_kind(kind: Any) -> List[str]:
    if kind is None:
        return ["kind is missing"]
    vendor, sep, cls = str(kind).partition("/")
    if not sep or not _VENDOR.match(vendor) or not _CLASS.match(cls):
        return [f"kind {kind!r} is not of the form vendor/class"]
    if kind != KIND:
        return [f"kind is {kind!r}, not {KIND!r}"]
    return []


def _validate_edits(edits: Any, where: str) -> List[str]:
    if not isinstance(edits, dict):
        return [f"{where} is not a mapping"]
    problems: List[str] = []
    required = {
        "deviceNodes": ("path",),
        "mounts": ("hostPath", "containerPath"),
        "hooks": ("hookName", "path"),
    }
    env = edits.get("env", [])
    if not isinstance(env, list) or not all(isinstance(e, str) and _ENV.match(e) for e in env):
        problems.append(f"{where}.env must be a list of KEY=VALUE strings")
    for key, fields in required.items():
        items = edits.get(key, [])
        if not isinstance(items, list):
            problems.append(f"{where}.{key} must be a list")
            continue
        for i, item in enumerate(items):
            missing = [
                f for f in fields if not (isinstance(item, dict) and isinstance(item.get(f), str) and item[f])
            ]
            if missing:
                problems.append(f"{where}.{key}[{i}] lacks {' and '.join(missing)}")
            elif key == "hooks" and item["hookName"] not in HOOK_NAMES:
                problems.append(f"{where}.hooks[{i}].hookName {item['hookName']!r} is not an OCI hook stage")
    return problems


def plan_spec(
    root: Path,
    output: str = CDI_SPEC,
    *,
    force: bool = False,
    generator: Optional[SpecGenerator] = None,
    use_installed: bool = True,
    driver: Optional[DriverRoot] = None,
) -> ConfigPlan:
    """Plan the CDI spec under ``root``; never writes.

    :param output: node path of the spec.
    :param force: replace an existing spec, valid or not.
    :param generator: where the spec comes from; default: :func:`find_generator`, else device nodes.
    :param use_installed: look for nvidia-ctk when no ``generator`` is given.
    :param driver: the driver root; default: :func:`configure.driverroot.detect_driver_root`.
    :raises ConfigFormatError: when an existing spec is invalid and ``force`` is false.
    :raises NoGpuDevices: when a new spec is needed and there are no GPU device nodes.
    """
    if not output.startswith("/") or posixpath.splitext(output)[1] not in (".yaml", ".json"):
        # CDI registries load only *.yaml and *.json files, from absolute spec directories.
        raise UsageError(f"--output must be an absolute path ending in .yaml or .json, not {output!r}")
    path = rooted(root, output)
    plan = ConfigPlan(engine=ENGINE)
    plan.facts["CDI_SPEC"] = output
    driver = driver or detect_driver_root(root)
    plan.facts["DRIVER_ROOT"] = driver.describe()
    if generator is None and use_installed:
        generator, warnings = find_generator(root, driver)
        plan.warnings.extend(warnings)
    old = read_optional(path)
    existing_problems: List[str] = []
    if old is not None:
        existing, existing_problems = check_spec(old)
        plan.facts["EXISTING_KEYS"] = ",".join(str(k) for k in existing) if isinstance(existing, dict) else ""
        plan.facts["EXISTING_VALID"] = "false" if existing_problems else "true"
        if existing_problems and not force:
            raise ConfigFormatError(
                path,
                f"the existing CDI spec is invalid ({'; '.join(existing_problems)}); use --force to replace it",
            )
        if existing_problems:
            plan.warnings.append(f"replacing the invalid spec {path}: {'; '.join(existing_problems)}")
    try:
        new, source = _generate(root, generator, plan, driver, as_json=output.endswith(".json"))
    except NoGpuDevices as exc:
        if old is None or existing_problems or force:
            raise
        plan.warnings.append(f"{exc.dev} has no GPU device nodes; kept the existing valid spec {path}")
        new, source = old, "existing"
    if old is not None and new != old:
        if _same_spec(old, new) and generated_for(old) == generated_for(new):
            new = old  # same content, other formatting: nothing to write
        elif not force:
            plan.warnings.append(f"kept the existing valid spec {path}; use --force to replace it")
            new, source = old, "existing"
    if source == "device-nodes" and new != old and not driver.containerized:
        plan.warnings.append(
            "the spec lists device nodes only; nvidia-ctk on the node also mounts the driver libraries"
        )
    plan.changes.append(FileChange(path, old, new, mode=0o644))
    data, _ = parse_spec(new)
    plan.facts["SOURCE"] = source
    plan.facts["KIND"] = str(data.get("kind", "")) if isinstance(data, dict) else ""
    devices = data.get("devices", []) if isinstance(data, dict) else []
    plan.facts["DEVICES"] = ",".join(str(d.get("name")) for d in devices if isinstance(d, dict))
    plan.notes.update({"output": output, "source": source})
    return plan


def _generate(
    root: Path, generator: Optional[SpecGenerator], plan: ConfigPlan, driver: DriverRoot, *, as_json: bool
) -> Tuple[bytes, str]:
    if generator is not None:
        try:
            raw = generator.generate()
        except ToolError as exc:
            plan.warnings.append(f"{generator.name} failed ({exc}); building the spec from device nodes")
        else:
            data, problems = check_spec(raw)
            if problems:
                raise ToolError(f"{generator.name} produced an invalid CDI spec: {'; '.join(problems)}")
            version = current_driver(root, driver_version(root))
            return (render_spec(data, as_json=True) if as_json else with_header(raw, version)), generator.name
    gpus, control = find_device_nodes(root, driver.dev_root)
    if not gpus:
        raise NoGpuDevices(rooted(root, posixpath.join(driver.dev_root, "dev")))
    spec = build_spec(gpus, control, driver.dev_root, driver_libraries(root, driver))
    if as_json:
        return render_spec(spec, as_json=True), "device-nodes"
    return with_header(render_spec(spec), current_driver(root, driver_version(root))), "device-nodes"


def _same_spec(a: bytes, b: bytes) -> bool:
    return bool(parse_spec(a)[0] == parse_spec(b)[0])
