"""k3s and RKE2: their agent writes containerd's config itself, on every start; we add only what it cannot.

The agent regenerates ``/var/lib/rancher/<k3s|rke2>/agent/etc/containerd/config.toml`` at each
start and finds NVIDIA's runtimes on its own (``nvidia-container-runtime`` -> handler ``nvidia``,
with the right ``SystemdCgroup``), searching ``/usr/local/nvidia/toolkit``, ``/opt/kwasm/bin`` and
its PATH. So by default we write **no containerd file**: the toolkit's binary is enough, and a
restart of ``k3s``/``k3s-agent``/``rke2-server``/``rke2-agent`` (not ``containerd``, which is the
agent's child) makes it register the handler; ``report``/``verify`` read the regenerated file back.

Only what detection cannot give is written, where the agent documents it:

* another runtime name or binary: a drop-in in the directory the generated config imports
  (``config-v3.toml.d/`` or ``config.toml.d/``, releases from March 2026 on; containerd 2 merges it
  key by key), else our block appended to ``config(-v3).toml.tmpl`` after
  ``{{ template "base" . }}`` with only tables the base does not render (:mod:`configure.distros.k3s_template`);
* CDI with config version 2: the drop-in only (``enable_cdi`` lives in the CRI table the base
  renders, which a template cannot declare again); with version 3, containerd 2 enables CDI by default;
* the default runtime: ``default-runtime`` in ``/etc/rancher/<k3s|rke2>/config.yaml.d/``, the
  agent's own option for it.

The generated ``config.toml`` is never edited.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import tomlkit

from configure import tomledit
from configure.changes import FileChange, read_optional
from configure.containerd.dropin import DROP_IN_HEADER
from configure.containerd.engine import CRI_PLUGIN, RUNC_V2, describe
from configure.containerd.imports import ConfigFile, covers, imports_of, load_chain, plugin_table
from configure.crio import merge
from configure.distros import k3s_template
from configure.distros.detection import Distro
from configure.engine import ConfigPlan, RuntimeOptions
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted

#: where the agent looks for runtimes: the GPU Operator's toolkit, kwasm, then its PATH
SEARCH_DIRS = (
    "/usr/local/nvidia/toolkit",
    "/opt/kwasm/bin",
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
)
#: handler -> binary the agent registers it for (pkg/agent/containerd/runtimes.go)
AUTO_RUNTIMES = {
    "nvidia": "nvidia-container-runtime",
    "nvidia-experimental": "nvidia-container-runtime-experimental",
    "nvidia-cdi": "nvidia-container-runtime.cdi",
}
DROP_IN_NAME = "99-gpu-airgap-nvidia.toml"
AGENT_CONFIG = "90-gpu-airgap.yaml"


def auto_found(root: Path) -> Dict[str, str]:
    """The runtimes the agent will register at its next start: handler -> the binary it finds first."""
    found: Dict[str, str] = {}
    for handler, binary in AUTO_RUNTIMES.items():
        for directory in SEARCH_DIRS:
            if rooted(root, f"{directory}/{binary}").is_file():
                found[handler] = f"{directory}/{binary}"
                break
    return found


def covered_by_agent(root: Path, name: str, binary: str) -> bool:
    """True when the agent itself registers runtime ``name`` with ``binary`` (once that is installed)."""
    wanted = AUTO_RUNTIMES.get(name)
    if wanted is None or posixpath.basename(binary) != wanted:
        return False
    first = auto_found(root).get(name)
    if first is not None:  # the agent takes the first one on its path, whatever we ask
        return first == binary or "/" not in binary
    return "/" not in binary or posixpath.dirname(binary) in SEARCH_DIRS


def agent_tables(root: Path, version: int) -> List[Tuple[str, ...]]:
    """The runtime tables the agent's base template renders for the runtimes it detects."""
    keys: List[Tuple[str, ...]] = []
    for handler in auto_found(root):
        entry = ("plugins", CRI_PLUGIN[version], "containerd", "runtimes", handler)
        keys += [entry, (*entry, "options")]
    return keys


def generated(root: Path, distro: Distro) -> Optional[Dict[str, Any]]:
    """The config the agent generated last, parsed; None before its first start."""
    path = rooted(root, distro.config)
    raw = read_optional(path)
    return tomledit.parse(path, raw).unwrap() if raw is not None else None


def drop_in_dir(distro: Distro, data: Dict[str, Any]) -> Optional[str]:
    """The drop-in directory the generated config imports (``config-v3.toml.d``/``config.toml.d``), if any."""
    for pattern in imports_of(data, distro.config):
        directory = posixpath.dirname(pattern)
        if directory.startswith(distro.data_dir + "/") and covers(pattern, f"{directory}/{DROP_IN_NAME}"):
            return directory
    return None


def plan(distro: Distro, options: RuntimeOptions, plan_: ConfigPlan) -> ConfigPlan:
    """Plan k3s/RKE2: usually nothing to write; see the module docstring."""
    root = options.root
    data = generated(root, distro)
    if data is None:
        raise ConfigFormatError(
            rooted(root, distro.config),
            f"does not exist yet; start {distro.name} once ({' or '.join(distro.units)}) so it writes its containerd config, then run this again",
        )
    version = int(data.get("version", 1)) if not isinstance(data.get("version"), bool) else 1
    if version not in (2, 3):
        raise ConfigFormatError(
            rooted(root, distro.config), f"has config version {version}; only 2 and 3 are supported"
        )
    plugin = CRI_PLUGIN[version]
    auto = covered_by_agent(root, options.runtime_name, options.runtime_path)
    cri_now = (data.get("plugins") or {}).get(plugin) or {}
    need_cdi = options.cdi and (version == 2 or cri_now.get("enable_cdi") is False)
    if options.systemd_cgroup != "auto":
        plan_.warnings.append(
            f"{distro.name} sets SystemdCgroup itself (it follows the kubelet); --systemd-cgroup is not used"
        )
    if options.cdi and not need_cdi:
        plan_.warnings.append(
            f"containerd 2 (config version 3) enables CDI by default; nothing to write for --cdi on {distro.name}"
        )
    if not auto or need_cdi:
        plan_.changes.append(
            _containerd_change(distro, options, data, version, plugin, auto, need_cdi, plan_)
        )
    if options.set_as_default:
        path = rooted(root, f"/etc/rancher/{distro.name}/config.yaml.d/{AGENT_CONFIG}")
        text = f"# Written by gpu-airgap (configure containerd); `gpu-airgap configure revert` removes it.\ndefault-runtime: {options.runtime_name}\n"
        plan_.changes.append(FileChange(path, read_optional(path), text.encode(), mode=0o644))
    if auto:
        plan_.warnings.append(
            f"{distro.name} registers the {options.runtime_name} runtime itself when it finds "
            f"{AUTO_RUNTIMES[options.runtime_name]} at start: no containerd file written; {distro.restart_hint()}"
        )
        if options.runtime_name not in auto_found(root):
            plan_.warnings.append(
                f"{options.runtime_path} is not installed yet; install the toolkit before the restart"
            )
    plan_.notes.update(
        config=distro.config,
        config_version=version,
        agent_registers=auto,
        runtime_name=options.runtime_name,
        runtime_path=options.runtime_path,
        set_as_default=options.set_as_default,
        previous_default=str(((cri_now.get("containerd") or {}).get("default_runtime_name")) or "runc"),
    )
    plan_.facts = report(root, distro, options.runtime_name)
    # Only a restart makes the agent regenerate its config with the runtime (or with our files).
    plan_.notes["restart_needed"] = plan_.changed or plan_.facts.get("RUNTIME") != options.runtime_name
    return plan_


def _containerd_change(
    distro: Distro,
    options: RuntimeOptions,
    data: Dict[str, Any],
    version: int,
    plugin: str,
    auto: bool,
    need_cdi: bool,
    plan_: ConfigPlan,
) -> FileChange:
    """The drop-in (when imported) or the template that adds what the agent does not."""
    directory = drop_in_dir(distro, data)
    systemd = _systemd(data, plugin)
    if directory is not None:
        path = rooted(options.root, f"{directory}/{DROP_IN_NAME}")
        doc = tomlkit.document()
        doc.add(tomlkit.comment(DROP_IN_HEADER.strip()[2:]))
        doc.add("version", version)
        cri: Dict[str, Any] = {"enable_cdi": True} if need_cdi else {}
        if not auto:
            entry: Dict[str, Any] = {"runtime_type": RUNC_V2, "options": {"BinaryName": options.runtime_path}}
            if systemd is not None:
                entry["options"]["SystemdCgroup"] = systemd
            cri["containerd"] = {"runtimes": {options.runtime_name: entry}}
        tomledit.merge(doc, {"plugins": {plugin: cri}}, path=path)
        plan_.notes["drop_in"] = f"{directory}/{DROP_IN_NAME}"
        old = read_optional(path)
        return FileChange(path, old, tomledit.render_over(old, doc), mode=0o644)
    if need_cdi:
        raise UsageError(
            f"{distro.name} renders the CRI table that holds enable_cdi itself and this version imports no drop-in "
            "directory, so CDI cannot be enabled without replacing its whole template; upgrade to a release that "
            "imports config.toml.d, or enable CDI by hand"
        )
    name = "config-v3.toml.tmpl" if version == 3 else "config.toml.tmpl"
    node = f"{distro.data_dir}/{name}"
    path = rooted(options.root, node)
    old = read_optional(path)
    existing = old.decode() if old is not None else ""
    quote = "'" if version == 3 else '"'
    block = k3s_template.runtime_block(plugin, options.runtime_name, options.runtime_path, systemd, quote)
    base = k3s_template.base_tables(
        _generated_text(options.root, distro), existing, agent_tables(options.root, version)
    )
    clash = k3s_template.redeclared(k3s_template.BASE + "\n" + block, base)
    if clash:
        raise UsageError(
            f"{distro.name} already renders [{clash[0]}] in its base template, so a template may not declare it again; "
            "choose another --runtime-name"
        )
    if existing and k3s_template.BASE not in existing:
        plan_.warnings.append(
            f"{node} does not use {k3s_template.BASE}: it replaces {distro.name}'s whole config"
        )
    plan_.notes["template"] = node
    return FileChange(path, old, k3s_template.with_block(existing, block).encode(), mode=0o644)


def _generated_text(root: Path, distro: Distro) -> str:
    raw = read_optional(rooted(root, distro.config))
    return raw.decode("utf-8", "replace") if raw is not None else ""


def _systemd(data: Dict[str, Any], plugin: str) -> Optional[bool]:
    """The agent's own SystemdCgroup choice, read from its runc entry."""
    runtimes = (((data.get("plugins") or {}).get(plugin) or {}).get("containerd") or {}).get("runtimes") or {}
    value = ((runtimes.get("runc") or {}).get("options") or {}).get("SystemdCgroup")
    return value if isinstance(value, bool) else None


def template_problems(root: Path, distro: Distro) -> List[str]:
    """An admin's template that redeclares a table the base renders: containerd will refuse the result."""
    problems: List[str] = []
    text = _generated_text(root, distro)
    for name in ("config-v3.toml.tmpl", "config.toml.tmpl"):
        raw = read_optional(rooted(root, f"{distro.data_dir}/{name}"))
        if raw is None:
            continue
        template = raw.decode("utf-8", "replace")
        version = 3 if name.startswith("config-v3") else 2
        base = k3s_template.base_tables(text, template, agent_tables(root, version))
        for table in k3s_template.redeclared(template, base):
            problems.append(
                f"{distro.data_dir}/{name} declares [{table}] again after the base template renders it; "
                "containerd refuses the generated config (remove that table from the template)"
            )
    return problems


def merged_cri(chain: List[ConfigFile], plugin: str) -> Dict[str, Any]:
    """The CRI table as containerd 2 reads it: imported tables merged key by key."""
    merged: Dict[str, Any] = {}
    for config in chain:
        merged = merge(merged, plugin_table(config.data, plugin) or {})
    return merged


def report(root: Path, distro: Distro, runtime_name: str) -> Dict[str, str]:
    """Facts read back from the agent's generated config and the drop-ins it imports."""
    data = generated(root, distro)
    if data is None:
        raise ConfigFormatError(rooted(root, distro.config), f"does not exist; start {distro.name} first")
    version = int(data.get("version", 1))
    chain = load_chain(root, distro.config, data)
    plugin = CRI_PLUGIN.get(version, CRI_PLUGIN[2])
    if version == 3 or data.get(
        "imports"
    ):  # only containerd 2 releases import drop-ins: it merges them key by key
        chain = [ConfigFile(distro.config, {"plugins": {plugin: merged_cri(chain, plugin)}})]
    return describe(chain, plugin, version, runtime_name)
