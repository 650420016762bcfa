"""CRI-O: register the NVIDIA runtime in a drop-in, or install the OCI prestart hook.

Runtime mode writes ``/etc/crio/crio.conf.d/99-nvidia.toml`` (``--no-drop-in``: edits crio.conf in
place) with ``[crio.runtime.runtimes.<name>]``: ``runtime_path``, ``runtime_type = "oci"``, and the
``monitor_path``/``runtime_root`` of the runtime CRI-O uses by default today. That default is read
from the *effective* configuration: ``/etc/crio/crio.conf`` and then every ``*.conf``/``*.toml``
file in ``/etc/crio/crio.conf.d`` in lexical order, later keys winning (what CRI-O itself does);
our own drop-in is left out so that a second run inherits the same values. The candidates, as in
nvidia-ctk, are the configured ``default_runtime`` (unless it is ours), then ``runc``, then
``crun``. A runtime table without ``monitor_path`` falls back to the global ``crio.runtime.conmon``
of older configs when that is set. crio.conf itself is never written in drop-in mode.
``default_runtime`` is only written with ``--set-as-default`` and its previous value is recorded.

Hook mode (``--hook``, deprecated upstream but still what CRI-O without a runtime entry and podman
use) writes ``/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json`` running
``nvidia-container-runtime-hook prestart`` for every container.

Note: the drop-in directory is ``crio.conf.d``; nvidia-ctk wrote ``/etc/crio/conf.d`` until v1.20.0,
which CRI-O never reads.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import tomlkit
from tomlkit.items import Table

from configure import tomledit
from configure.changes import FileChange, json_change, read_optional
from configure.engine import ConfigPlan, Engine, RuntimeOptions
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted
from plumbing.textio import decode_utf8

CRIO_CONF = "/etc/crio/crio.conf"
CRIO_DROP_IN_DIR = "/etc/crio/crio.conf.d"
CRIO_DROP_IN = CRIO_DROP_IN_DIR + "/99-nvidia.toml"
OCI_HOOK = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"
HOOK_BINARY = "nvidia-container-runtime-hook"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: runtime-table keys copied from the default runtime
INHERITED_KEYS = ("monitor_path", "runtime_root")


def parse_toml(text: str, path: object) -> Dict[str, Any]:
    """Parse CRI-O TOML into plain dicts.

    :raises ConfigFormatError: for invalid TOML.
    """
    return tomledit.parse_text(text, path).unwrap()


def merge(base: Dict[str, Any], override: Dict[str, Any]) -> Dict[str, Any]:
    """Deep-merge ``override`` into a copy of ``base``: tables merge key by key, other values replace."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def source_files(root: Path, config: str, extra: Optional[Path] = None) -> List[Path]:
    """crio.conf, then the drop-ins in the order CRI-O reads them (lexical), with ``extra`` in its place."""
    directory = rooted(root, CRIO_DROP_IN_DIR)
    drop_ins: Dict[str, Path] = {}  # CRI-O orders them by the name in the directory, a link's own name
    if directory.is_dir():
        for entry in directory.iterdir():
            resolved = rooted(
                root, f"{CRIO_DROP_IN_DIR}/{entry.name}"
            )  # a linked drop-in, read inside the root
            if entry.suffix in (".conf", ".toml") and resolved.is_file():
                drop_ins[entry.name] = resolved
    if extra is not None and extra.parent == directory:
        drop_ins[extra.name] = extra
    return [rooted(root, config), *(drop_ins[name] for name in sorted(drop_ins))]


def effective_config(
    files: List[Path], replace: Optional[Dict[Path, Optional[bytes]]] = None
) -> Dict[str, Any]:
    """Merge the files that exist, in order; ``replace`` substitutes content (None: leave the file out)."""
    merged: Dict[str, Any] = {}
    for path in files:
        raw = replace[path] if replace and path in replace else read_optional(path)
        if raw is not None:
            merged = merge(merged, parse_toml(decode_utf8(raw, path), path))
    return merged


def _runtime_section(config: Dict[str, Any]) -> Dict[str, Any]:
    crio = config.get("crio")
    section = crio.get("runtime") if isinstance(crio, dict) else None
    return section if isinstance(section, dict) else {}


def configured_default(config: Dict[str, Any]) -> Optional[str]:
    """The ``default_runtime`` the files set, or None when CRI-O's compiled-in default applies."""
    value = _runtime_section(config).get("default_runtime")
    return value if isinstance(value, str) and value else None


def inherited_options(config: Dict[str, Any], runtime_name: str) -> Tuple[Optional[str], Dict[str, str]]:
    """Pick the runtime we copy from and return ``(its name, {monitor_path, runtime_root})``."""
    section = _runtime_section(config)
    runtimes = section.get("runtimes", {})
    default = configured_default(config)
    candidates = [
        c for c in (default, "runc", "crun") if c and c != runtime_name and not c.startswith("nvidia")
    ]
    for candidate in candidates:
        table = runtimes.get(candidate) if isinstance(runtimes, dict) else None
        if not isinstance(table, dict):
            continue
        values = {k: table[k] for k in INHERITED_KEYS if isinstance(table.get(k), str) and table[k]}
        conmon = section.get("conmon")
        if "monitor_path" not in values and isinstance(conmon, str) and conmon:
            values["monitor_path"] = conmon  # pre-1.2x configs name conmon globally
        return candidate, values
    return None, {}


def _table(container: Any, key: str, path: object) -> Table:
    """The sub-table ``key`` of ``container``, created as a super table (header-less) when absent."""
    if key not in container:
        container.add(key, tomlkit.table(is_super_table=True))
    value = container[key]
    if not isinstance(value, Table):
        raise ConfigFormatError(path, f'"{key}" must be a TOML table')
    return value


def _set(table: Table, key: str, value: str) -> None:
    # Assign only on change so tomlkit keeps the original text (a second run writes nothing).
    if table.get(key) != value:
        table[key] = value


def render_runtime(
    text: str, path: object, runtime_name: str, values: Dict[str, str], set_as_default: bool
) -> str:
    """Add or update ``[crio.runtime.runtimes.<name>]`` in ``text`` (empty for a new drop-in)."""
    doc = tomledit.parse_text(text, path)
    if not text:
        doc.add(tomlkit.comment("NVIDIA runtime for CRI-O, written by gpu-airgap configure crio."))
    runtime = _table(_table(doc, "crio", path), "runtime", path)
    if set_as_default:
        _set(runtime, "default_runtime", runtime_name)
    runtimes = _table(runtime, "runtimes", path)
    if runtime_name not in runtimes:
        runtimes.add(runtime_name, tomlkit.table())
    entry = runtimes[runtime_name]
    if not isinstance(entry, Table):
        raise ConfigFormatError(path, f'"crio.runtime.runtimes.{runtime_name}" must be a TOML table')
    for key, value in values.items():
        _set(entry, key, value)
    return tomlkit.dumps(doc)


def hook_config(hook_path: str) -> Dict[str, Any]:
    """The OCI hook JSON (oci-hooks(5)) for ``nvidia-container-runtime-hook prestart``."""
    directory = posixpath.dirname(hook_path)
    search = DEFAULT_PATH if directory in DEFAULT_PATH.split(":") else f"{DEFAULT_PATH}:{directory}"
    return {
        "version": "1.0.0",
        "hook": {"path": hook_path, "args": [HOOK_BINARY, "prestart"], "env": [f"PATH={search}"]},
        "when": {"always": True, "commands": [".*"]},
        "stages": ["prestart"],
    }


#: the OCI hook stages podman and CRI-O accept (oci-hooks(5))
HOOK_STAGES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")


def hook_problems(raw: bytes) -> List[str]:
    """Every reason podman or CRI-O would refuse this hook file (oci-hooks(5), version 1.0.0); none: valid.

    A hooks directory with one invalid file makes podman fail every container, so this is checked
    before anything runs.
    """
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return [f"not valid JSON: {exc}"]
    if not isinstance(data, dict):
        return ["the hook is not a JSON object"]
    problems: List[str] = []
    if data.get("version") != "1.0.0":
        problems.append(f"version is {data.get('version')!r}, not '1.0.0'")
    hook = data.get("hook")
    if (
        not isinstance(hook, dict)
        or not isinstance(hook.get("path"), str)
        or not hook["path"].startswith("/")
    ):
        problems.append("hook.path must be an absolute path")
    when = data.get("when")
    if not isinstance(when, dict) or not any(
        when.get(k) for k in ("always", "annotations", "commands", "hasBindMounts")
    ):
        problems.append("when must set always, annotations, commands or hasBindMounts")
    stages = data.get("stages")
    if not isinstance(stages, list) or not stages or any(stage not in HOOK_STAGES for stage in stages):
        problems.append(f"stages must list one or more of {', '.join(HOOK_STAGES)}")
    return problems


class CrioEngine:
    """The CRI-O engine: one drop-in (or crio.conf in place), or the OCI hook file."""

    name = "crio"

    def plan(self, options: RuntimeOptions) -> ConfigPlan:
        """Read the effective CRI-O configuration, render our drop-in or hook; never write."""
        if not options.runtime_path.startswith("/"):
            raise UsageError(f"CRI-O needs an absolute --runtime-path, not {options.runtime_path!r}")
        plan = ConfigPlan(engine=self.name)
        if options.cdi:
            plan.warnings.append("CRI-O always has CDI enabled; --cdi changes nothing for crio")
        if options.hook:
            return self._plan_hook(options, plan)
        config = options.config or CRIO_CONF
        target = rooted(options.root, config if options.no_drop_in else (options.drop_in or CRIO_DROP_IN))
        files = source_files(options.root, config, extra=target)
        # Inherit from what CRI-O would run without our drop-in, so every run inherits the same values.
        source = effective_config(files, None if options.no_drop_in else {target: None})
        inherited_from, values = inherited_options(source, options.runtime_name)
        if inherited_from is None:
            plan.warnings.append(
                "no default, runc or crun runtime is configured in crio.conf or its drop-ins; "
                "monitor_path and runtime_root are left to CRI-O's defaults"
            )
        old = read_optional(target)
        text = "" if old is None else decode_utf8(old, target)
        fields = {"runtime_path": options.runtime_path, "runtime_type": "oci", **values}
        new = render_runtime(text, target, options.runtime_name, fields, options.set_as_default).encode()
        plan.changes.append(FileChange(target, old, new, mode=0o644))
        plan.warnings.extend(_overridden_by_later(options, target, files))
        plan.notes.update(
            {
                "config": config,
                "drop_in": None if options.no_drop_in else (options.drop_in or CRIO_DROP_IN),
                "runtime_name": options.runtime_name,
                "runtime_path": options.runtime_path,
                "set_as_default": options.set_as_default,
                "previous_default": configured_default(source),
                "inherited_from": inherited_from,
            }
        )
        plan.facts.update(_facts(effective_config(files, {target: new}), options.runtime_name))
        return plan

    def _plan_hook(self, options: RuntimeOptions, plan: ConfigPlan) -> ConfigPlan:
        target = rooted(options.root, OCI_HOOK)
        hook_path = posixpath.join(posixpath.dirname(options.runtime_path), HOOK_BINARY)
        plan.changes.append(json_change(target, hook_config(hook_path)))
        plan.notes.update({"mode": "hook", "hook_path": hook_path})
        plan.facts.update({"HOOK": OCI_HOOK, "HOOK_PATH": hook_path})
        if options.set_as_default:
            plan.warnings.append(
                "--set-as-default has no meaning in hook mode; the hook runs for every container"
            )
        return plan

    def report(self, root: Path, runtime_name: str, config: Optional[str] = None) -> Dict[str, str]:
        """Read the effective configuration under ``root`` back: RUNTIME, RUNTIME_TYPE, RUNTIME_PATH, DEFAULT.

        DEFAULT is absent when no file sets ``default_runtime`` (CRI-O's compiled-in default applies);
        HOOK is present when the OCI hook file exists.
        """
        facts = _facts(effective_config(source_files(root, config or CRIO_CONF)), runtime_name)
        if rooted(root, OCI_HOOK).is_file():
            facts["HOOK"] = OCI_HOOK
        return facts


def _facts(config: Dict[str, Any], runtime_name: str) -> Dict[str, str]:
    facts: Dict[str, str] = {}
    runtimes = _runtime_section(config).get("runtimes", {})
    entry = runtimes.get(runtime_name) if isinstance(runtimes, dict) else None
    if isinstance(entry, dict):
        facts["RUNTIME"] = runtime_name
        facts["RUNTIME_TYPE"] = str(entry.get("runtime_type", "oci"))
        facts["RUNTIME_PATH"] = str(entry.get("runtime_path", ""))
    default = configured_default(config)
    if default is not None:
        facts["DEFAULT"] = default
    return facts


def _overridden_by_later(options: RuntimeOptions, target: Path, files: List[Path]) -> List[str]:
    """Warn about drop-ins read after ours (in ``files``, the :func:`source_files`) that redefine what we set."""
    if options.no_drop_in:
        return []
    if target not in files:
        return [
            f"CRI-O reads drop-ins from {CRIO_DROP_IN_DIR} only (unless started with --config-dir); {target} may never be read"
        ]
    warnings = []
    for path in files[files.index(target) + 1 :]:
        raw = read_optional(path)
        section = _runtime_section(parse_toml(decode_utf8(raw or b"", path), path))
        runtimes = section.get("runtimes", {})
        if isinstance(runtimes, dict) and options.runtime_name in runtimes:
            warnings.append(
                f"{path} is read after {target.name} and redefines runtime {options.runtime_name}"
            )
        if options.set_as_default and "default_runtime" in section:
            warnings.append(f"{path} is read after {target.name} and sets default_runtime, which wins")
    return warnings


_: Engine = CrioEngine()
