"""containerd: register the NVIDIA runtime in the CRI plugin, keeping every comment and key order.

Decisions (and the NVIDIA bugs they avoid, see docs/runtime-config.md):

* **Version from the file on disk**, never ``containerd config dump`` (which can say 4 for a v2
  file). A non-empty config without ``version`` is v1. A missing or key-less config gets a
  minimal one: version 3 when the containerd under the root is 2.x, else version 2
  (:mod:`configure.nodefacts` says how the version is found).
* **CRI plugin key**: v1 ``cri``, v2 ``io.containerd.grpc.v1.cri``, v3 ``io.containerd.cri.v1.runtime``.
  ``enable_cdi`` is a key of that plugin table in every version (containerd's ``PluginConfig``);
  NVIDIA's v1 ``containerd.enable_cdi`` is a nesting containerd does not read.
* **In place or drop-in.** A drop-in (default ``/etc/containerd/conf.d/99-nvidia.toml``) is used
  when the root config already has ``imports``, or containerd 2.x is installed, or ``--drop-in``
  says so; a v1 config is always edited in place. The import is added to the root config only
  when no existing import (path or glob) loads the drop-in, and then as the exact path, so we
  never start loading other files someone left in ``conf.d``.
* **What the drop-in holds.** containerd < 2.1 replaces a plugin's whole table with the one of a
  later file, so the drop-in carries a copy of the CRI table containerd would use *without* it
  (the last file before ours in load order that defines it), plus our changes. Under the deep
  merge of 2.1+ that copy merges to the same result. The price: CRI settings edited in the root
  config later are shadowed by the copy until ``configure containerd`` runs again (it re-copies).
  Files loaded after ours that redefine the CRI table would hide the runtime: we warn.
* **Never replace a drop-in someone else wrote.** Ours starts with our header and still has the
  bytes we wrote (the journal holds their digest); it is regenerated, keeping the runtimes of
  earlier runs. Anything else at that path (an admin's own ``99-nvidia.toml`` with ``kata``, or
  ours edited since) is added to like a config edited in place, and keeps everything it holds;
  ``revert`` restores its bytes. It must declare no other config version than the root config.
* **Defining ``runtimes`` hides containerd's built-in runc.** A config with a CRI ``runtimes``
  table but no ``runc`` leaves ``default_runtime_name = "runc"`` dangling and CRI fails to start
  (checked with containerd 1.6), so we add ``runc`` when the default is runc and it is missing.
* **SystemdCgroup**: ``--systemd-cgroup`` wins; else copied from the default runtime (or runc,
  or crun); else the kubelet's ``cgroupDriver``; else left unset with a warning.
* ``default_runtime_name`` changes only with ``--set-as-default``; the previous value goes into
  the plan notes (journal), so ``verify`` knows the operator's choice and ``revert`` restores it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import tomlkit
from tomlkit.toml_document import TOMLDocument

from configure import tomledit
from configure.changes import FileChange, read_optional
from configure.containerd.dropin import drop_in_doc, foreign_drop_in
from configure.containerd.imports import (
    ConfigFile,
    covers,
    defining_file,
    effective_plugin,
    imports_of,
    load_chain,
    plugin_table,
)
from configure.engine import ConfigPlan, RuntimeOptions
from configure.journal import Journal
from configure.nodefacts import KubeletProbe, VersionProbe, containerd_version, kubelet_cgroup_driver
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted

DEFAULT_CONFIG = "/etc/containerd/config.toml"
DEFAULT_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
RUNC_V2 = "io.containerd.runc.v2"
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
#: names under which ``disabled_plugins`` switches the CRI runtime off
CRI_NAMES = frozenset({"cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"})


def config_version(path: Path, doc: Optional[Mapping[str, Any]], fresh_version: int) -> int:
    """The config version of a parsed root config (``fresh_version`` when it has no keys).

    :raises ConfigFormatError: for a version this tool does not know.
    """
    if doc is None or len(doc) == 0:
        return fresh_version
    version = doc.get("version", 1)
    if isinstance(version, bool) or version not in CRI_PLUGIN:
        raise ConfigFormatError(
            path, f"has config version {version!r}; only versions 1, 2 and 3 are supported"
        )
    return int(version)


class ContainerdEngine:
    """The containerd implementation of :class:`configure.engine.Engine`."""

    name = "containerd"

    def __init__(
        self,
        version_probe: VersionProbe = containerd_version,
        kubelet_probe: KubeletProbe = kubelet_cgroup_driver,
    ) -> None:
        self.version_probe = version_probe
        self.kubelet_probe = kubelet_probe

    def plan(self, options: RuntimeOptions) -> ConfigPlan:
        """Load the root config (and its imports), add the runtime in memory, render; never write."""
        if options.no_drop_in and options.drop_in:
            raise UsageError("--drop-in and --no-drop-in cannot be used together")
        config_node = options.config or DEFAULT_CONFIG
        config_path = rooted(options.root, config_node)
        raw = read_optional(config_path)
        # The values only; tomlkit parses the root config further down only when we edit it.
        data: Dict[str, Any] = tomledit.load(config_path, raw) if raw is not None else {}
        installed = self.version_probe(options.root)
        version = config_version(config_path, data, 3 if installed and installed[0] >= 2 else 2)
        plugin = CRI_PLUGIN[version]
        plan = ConfigPlan(engine=self.name)
        containerd2 = installed is not None and installed[0] >= 2
        drop_in = self._drop_in_path(options, config_node, version, data, containerd2)

        extra_import = None
        if drop_in is not None and not any(covers(i, drop_in) for i in imports_of(data, config_node)):
            extra_import = drop_in
        drop_path = rooted(options.root, drop_in) if drop_in is not None else None
        old_drop_in = read_optional(drop_path) if drop_path is not None else None
        entries = Journal(options.root).entries() if old_drop_in else []
        foreign = foreign_drop_in(drop_path, old_drop_in, version, entries)
        # runtimes earlier runs registered in our drop-in, which a regenerated one keeps
        earlier = {str(e.notes.get("runtime_name")) for e in entries if e.engine == self.name}
        chain = load_chain(
            options.root,
            config_node,
            data,
            ours=drop_in,
            ours_data=foreign.unwrap() if foreign is not None else None,
            extra_import=extra_import,
            warnings=plan.warnings,
        )
        _refuse_disabled_cri(options.root, chain)
        # In place (or adding to someone's drop-in) the file we edit counts; files loaded after it can still hide it.
        position = next((i for i, c in enumerate(chain) if c.ours), 0)
        edited = drop_in is None or foreign is not None
        before, after = chain[: position + 1] if edited else chain[:position], chain[position + 1 :]
        source = effective_plugin(before, plugin)
        origin = defining_file(before, plugin)
        # Where a non-table in the way of our keys comes from: the file that defines the CRI table.
        source_path = rooted(options.root, origin.path) if origin is not None else config_path
        for later in after:
            if plugin_table(later.data, plugin) is not None:
                plan.warnings.append(
                    f"{later.path} is loaded after {drop_in or config_node} and redefines plugins.{plugin}; "
                    f"containerd before 2.1 would then not see the {options.runtime_name} runtime"
                )

        root_doc: Optional[TOMLDocument] = None
        if drop_in is None or extra_import is not None or not data:
            root_doc = tomledit.parse(config_path, raw) if raw is not None else tomlkit.document()
            if not data:  # a missing or key-less config gets a minimal valid one
                tomledit.set_value(root_doc, "version", version)
        if drop_in is None or drop_path is None:
            assert root_doc is not None  # in place: parsed above
            target = root_doc
        else:
            if foreign is not None:
                plan.warnings.append(
                    f"{drop_in} was not written by gpu-airgap: adding the {options.runtime_name} runtime to it "
                    "and keeping everything else in it (`configure revert` puts it back as it was)"
                )
                if extra_import is not None:  # containerd did not read it: now it reads all of it
                    plan.warnings.append(
                        f"containerd did not load {drop_in} until now; the import added for it also loads "
                        "everything else it holds"
                    )
                source_path = drop_path
            target = drop_in_doc(
                foreign,
                old_drop_in,
                drop_path,
                version,
                plugin,
                source,
                source_path,
                earlier - {options.runtime_name},
            )
            if extra_import is not None and root_doc is not None:
                _add_import(root_doc, drop_in)
        desired = self._desired_cri(source, options, plan)
        tomledit.merge(target, {"plugins": {plugin: desired}}, path=source_path)

        # The values of each file as written, the way containerd will load them (read once per file).
        rendered: Dict[Path, Dict[str, Any]] = {}
        if drop_path is not None:
            new_drop_in, rendered[drop_path] = _rendered(drop_path, old_drop_in, target)
            plan.changes.append(FileChange(drop_path, old_drop_in, new_drop_in))
        if (
            root_doc is None and raw is not None
        ):  # untouched (a drop-in already imported): tomlkit never read it
            new_root, rendered[config_path] = raw, data
        else:
            new_root, rendered[config_path] = _rendered(
                config_path, raw, root_doc or tomlkit.document(), data if raw is not None else None
            )
        plan.changes.append(FileChange(config_path, raw, new_root))

        plan.notes.update(
            config=config_node,
            drop_in=drop_in,
            config_version=version,
            runtime_name=options.runtime_name,
            runtime_path=options.runtime_path,
            set_as_default=options.set_as_default,
        )
        # Read the facts back from the rendered bytes, the way containerd would load them.
        final = [
            ConfigFile(c.path, rendered[rooted(options.root, drop_in)] if c.ours and drop_in else c.data)
            for c in chain[1:]
        ]
        final.insert(0, ConfigFile(config_node, rendered[config_path]))
        plan.facts = describe(final, plugin, version, options.runtime_name)
        return plan

    def report(self, root: Path, runtime_name: str, config: Optional[str] = None) -> Dict[str, str]:
        """Read the root config and its imports back from disk and describe ``runtime_name``."""
        config_node = config or DEFAULT_CONFIG
        path = rooted(root, config_node)
        raw = read_optional(path)
        if raw is None:
            raise ConfigFormatError(path, "does not exist; run `gpu-airgap configure containerd` first")
        data = tomledit.load(path, raw)
        version = config_version(path, data, 2)
        chain = load_chain(root, config_node, data)
        return describe(chain, CRI_PLUGIN[version], version, runtime_name)

    def _drop_in_path(
        self, options: RuntimeOptions, config_node: str, version: int, data: Dict[str, Any], containerd2: bool
    ) -> Optional[str]:
        if options.no_drop_in:
            return None
        if version == 1:
            if options.drop_in:
                raise UsageError(
                    "a version 1 containerd config cannot import drop-ins; omit --drop-in to edit it in place"
                )
            return None
        if options.drop_in:
            if not options.drop_in.startswith("/"):
                raise UsageError(f"--drop-in must be an absolute path, not {options.drop_in!r}")
            drop_in = posixpath.normpath(options.drop_in)
            if drop_in == posixpath.normpath(config_node):
                # Both would be written to one file and the second write would drop the runtime.
                raise UsageError(
                    f"--drop-in {options.drop_in} is the main config itself; use --no-drop-in to edit it in place"
                )
            return drop_in
        return DEFAULT_DROP_IN if data.get("imports") or containerd2 else None

    def _desired_cri(
        self, source: Dict[str, Any], options: RuntimeOptions, plan: ConfigPlan
    ) -> Dict[str, Any]:
        """What the CRI plugin table must hold: the runtime entry, and CDI and the default if asked."""
        name = options.runtime_name
        runtimes = _table(_table(source, "containerd"), "runtimes")
        previous_default = str(_table(source, "containerd").get("default_runtime_name", "runc"))
        plan.notes["previous_default"] = previous_default
        existing = _table(runtimes, name)
        old_path = _table(existing, "options").get("BinaryName")
        if old_path not in (None, options.runtime_path):
            plan.warnings.append(
                f"updating the existing {name} runtime from {old_path} to {options.runtime_path}"
            )
        if existing.get("runtime_type") not in (None, RUNC_V2):
            plan.warnings.append(
                f"changing the runtime_type of {name} from {existing['runtime_type']} to {RUNC_V2}"
            )

        entry_options: Dict[str, Any] = {"BinaryName": options.runtime_path}
        systemd = self._systemd_cgroup(options, runtimes, previous_default, plan)
        if systemd is not None:
            entry_options["SystemdCgroup"] = systemd
        wanted: Dict[str, Any] = {name: {"runtime_type": RUNC_V2, "options": entry_options}}
        if previous_default == "runc" and "runc" not in runtimes and name != "runc":
            # A runtimes table in the config replaces containerd's built-in one, where runc lived.
            wanted["runc"] = {"runtime_type": RUNC_V2}
            if systemd is not None:
                wanted["runc"]["options"] = {"SystemdCgroup": systemd}
        elif previous_default not in runtimes and previous_default not in (name, "runc"):
            plan.warnings.append(f"the default runtime {previous_default!r} is not defined in runtimes")

        containerd: Dict[str, Any] = {}
        if options.set_as_default:
            containerd["default_runtime_name"] = name
        elif previous_default == name:
            plan.warnings.append(f"{name} is already the default runtime; left as it is")
        containerd["runtimes"] = wanted
        desired: Dict[str, Any] = {"containerd": containerd}
        if options.cdi:
            desired["enable_cdi"] = True
        return desired

    def _systemd_cgroup(
        self, options: RuntimeOptions, runtimes: Dict[str, Any], default: str, plan: ConfigPlan
    ) -> Optional[bool]:
        """Pick SystemdCgroup: the flag, the default runtime's value, the kubelet's driver, or None."""
        kubelet = self.kubelet_probe(options.root)
        if options.systemd_cgroup in ("true", "false"):
            chosen: Optional[bool] = options.systemd_cgroup == "true"
            plan.notes["systemd_cgroup_from"] = "--systemd-cgroup"
        else:
            chosen = None
            for candidate in (default, "runc", "crun"):
                table = runtimes.get(candidate)
                if candidate == options.runtime_name or not isinstance(table, dict):
                    continue
                value = (table.get("options") or {}).get("SystemdCgroup")
                if isinstance(value, bool):
                    chosen = value
                    plan.notes["systemd_cgroup_from"] = f"runtime {candidate}"
                    break
            if chosen is None and kubelet is not None:
                chosen = kubelet == "systemd"
                plan.notes["systemd_cgroup_from"] = "kubelet cgroupDriver"
            if chosen is None:
                existing = runtimes.get(options.runtime_name)
                if isinstance(existing, dict) and "SystemdCgroup" in (existing.get("options") or {}):
                    return None  # keep what the existing entry says
                plan.warnings.append(
                    "SystemdCgroup is left unset (containerd then uses cgroupfs): no default runtime value and "
                    "no kubelet config to follow; pass --systemd-cgroup true|false to match the kubelet"
                )
                return None
        if kubelet is not None and chosen != (kubelet == "systemd"):
            plan.warnings.append(
                f"SystemdCgroup = {str(chosen).lower()} does not match the kubelet's cgroupDriver {kubelet}"
            )
        return chosen


def describe(chain: List[ConfigFile], plugin: str, version: int, runtime_name: str) -> Dict[str, str]:
    """The report facts about ``runtime_name`` in a loaded chain of containerd config files."""
    cri = effective_plugin(chain, plugin)
    containerd = _table(cri, "containerd")
    runtimes = _table(containerd, "runtimes")
    entry = runtimes.get(runtime_name) if isinstance(runtimes.get(runtime_name), dict) else None
    opts = _table(entry or {}, "options")
    systemd = opts.get("SystemdCgroup")
    facts = {
        "CONFIG_VERSION": str(version),
        "RUNTIME": runtime_name if entry is not None else "",
        "RUNTIME_TYPE": str((entry or {}).get("runtime_type", "")),
        "RUNTIME_PATH": str(opts.get("BinaryName", "")),
        "SYSTEMD_CGROUP": str(systemd).lower() if isinstance(systemd, bool) else "unset",
        "DEFAULT": str(containerd.get("default_runtime_name", "runc")),
        "CDI": str(bool(cri.get("enable_cdi", False))).lower(),
        "RUNTIMES": ",".join(sorted(runtimes)),
    }
    if isinstance(cri.get("sandbox_image"), str):  # versions 1 and 2; what pods need on the node
        facts["SANDBOX_IMAGE"] = cri["sandbox_image"]
    return facts


def _table(data: Dict[str, Any], key: str) -> Dict[str, Any]:
    """``data[key]`` when it is a table, else an empty one (configs in the wild are not always tidy)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _add_import(doc: TOMLDocument, path: str) -> None:
    """Append ``path`` to the root config's ``imports`` (keeping the array's own layout)."""
    if "imports" in doc:
        doc["imports"].append(path)
    else:
        tomledit.set_value(doc, "imports", [path])


def _rendered(
    path: Path, old: Optional[bytes], doc: TOMLDocument, old_values: Optional[Dict[str, Any]] = None
) -> Tuple[bytes, Dict[str, Any]]:
    """``doc`` rendered over ``old`` (:func:`configure.tomledit.render_over`) and the values of those bytes."""
    new, values = tomledit.render_with_values(old, doc, old_values)
    return new, values if values is not None else tomledit.load(path, new)


def _refuse_disabled_cri(root: Path, chain: List[ConfigFile]) -> None:
    """containerd with CRI disabled would accept the runtime and never use it: refuse instead."""
    for config in chain:
        disabled = config.data.get("disabled_plugins", [])
        hit = sorted(CRI_NAMES.intersection(disabled)) if isinstance(disabled, list) else []
        if hit:
            raise ConfigFormatError(
                rooted(root, config.path),
                f"disables the CRI plugin (disabled_plugins has {hit[0]!r}), so Kubernetes cannot use any "
                "runtime registered there; remove it from disabled_plugins first",
            )
