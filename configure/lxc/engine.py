"""LXC: LXC's own NVIDIA mount hook, per container.

LXC ships ``/usr/share/lxc/hooks/nvidia``; as a mount hook it runs ``nvidia-container-cli
configure`` for the container's root filesystem, with the devices and capabilities it reads from
the container's environment (``NVIDIA_VISIBLE_DEVICES``, ``NVIDIA_DRIVER_CAPABILITIES``). So
``configure lxc --container NAME`` appends to ``LXCPATH/NAME/config`` (``--lxcpath``, else the
``lxc.lxcpath`` of ``/etc/lxc/lxc.conf``, else ``/var/lib/lxc``)::

    lxc.environment = NVIDIA_VISIBLE_DEVICES=all
    lxc.environment = NVIDIA_DRIVER_CAPABILITIES=compute,utility
    lxc.hook.mount = /usr/share/lxc/hooks/nvidia

and nothing else: a line already there is not added again, a variable the container already sets
keeps its value (with a warning), and ``revert`` takes out exactly the lines we added
(:mod:`configure.lineedits`). The hook refuses privileged containers ("only works in unprivileged
mode", a limit of libnvidia-container), so a container whose config (with its ``lxc.include``
files) maps no ids (``lxc.idmap``) is refused before anything is written.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from configure import lineedits
from configure.changes import FileChange, read_optional
from configure.engine import ConfigPlan, Engine, RuntimeOptions
from configure.journal import Journal
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted, rooted_or_none
from plumbing.textio import decode_utf8

ENGINE = "lxc"
LXCPATH = "/var/lib/lxc"
LXC_CONF = "/etc/lxc/lxc.conf"  #: the system config, where ``lxc.lxcpath`` moves the containers
HOOK = "/usr/share/lxc/hooks/nvidia"
CLI = "nvidia-container-cli"
#: where the hook finds nvidia-container-cli (the PATH lxc-start has)
CLI_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
DEFAULT_DEVICES = "all"
DEFAULT_CAPABILITIES = "compute,utility"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_IDMAP_KEYS = ("lxc.idmap", "lxc.id_map")  # lxc.id_map: the pre-3.0 spelling


def default_lxcpath(root: Path) -> str:
    """Where LXC keeps containers on the node: ``lxc.lxcpath`` of ``/etc/lxc/lxc.conf``, else ``/var/lib/lxc``."""
    raw = read_optional(rooted(root, LXC_CONF))
    configured = lineedits.values(raw.decode("utf-8", "replace"), "lxc.lxcpath") if raw is not None else []
    return configured[-1] if configured and configured[-1].startswith("/") else LXCPATH


def config_path(root: Path, lxcpath: Optional[str], container: str) -> str:
    """The node path of ``container``'s config.

    :raises UsageError: for a name LXC would not take, or a relative ``--lxcpath``.
    """
    if not _NAME.match(container):
        raise UsageError(
            f"--container {container!r} is not an LXC container name (letters, digits, '.', '-', '_')"
        )
    directory = lxcpath or default_lxcpath(root)
    if not directory.startswith("/"):
        raise UsageError(f"--lxcpath must be an absolute directory, not {directory!r}")
    return posixpath.join(directory, container, "config")


def idmaps(root: Path, text: str, seen: Optional[Set[str]] = None) -> List[str]:
    """The ``lxc.idmap`` values of a config and of the files it includes (``lxc.include``, a file or a directory)."""
    seen = seen if seen is not None else set()
    found = [value for key, value in lineedits.config_lines(text) if key in _IDMAP_KEYS]
    for include in lineedits.values(text, "lxc.include"):
        if include in seen or not include.startswith("/"):
            continue
        seen.add(include)
        for file in _included_files(root, include):
            raw = read_optional(file) if file.is_file() else None
            if raw is not None:
                found += idmaps(root, raw.decode("utf-8", "replace"), seen)
    return found


def _included_files(root: Path, include: str) -> List[Path]:
    """The files ``lxc.include`` names (a file, or a directory's ``*.conf``), each link followed under ``root``.

    A link that leads out of the root is no file of the node: it is skipped.
    """
    path = rooted_or_none(root, include)
    if path is None or not path.is_dir():
        return [path] if path is not None else []
    names = sorted(p.name for p in path.iterdir() if p.suffix == ".conf")
    return [
        file
        for file in (rooted_or_none(root, posixpath.join(include, name)) for name in names)
        if file is not None
    ]


def environment(text: str) -> Dict[str, str]:
    """The container's ``lxc.environment`` variables (the last value of each wins, as in LXC)."""
    env: Dict[str, str] = {}
    for value in lineedits.values(text, "lxc.environment"):
        name, sep, setting = value.partition("=")
        if sep:
            env[name.strip()] = setting.strip()
    return env


def wanted_lines(text: str, devices: str, capabilities: str) -> Tuple[List[str], List[str]]:
    """The lines to add to a config with ``text``, and warnings about variables it already sets."""
    env = environment(text)
    lines: List[str] = []
    warnings: List[str] = []
    for name, value in (("NVIDIA_VISIBLE_DEVICES", devices), ("NVIDIA_DRIVER_CAPABILITIES", capabilities)):
        if name not in env:
            lines.append(f"lxc.environment = {name}={value}")
        elif env[name] != value:
            warnings.append(
                f"the container already sets {name}={env[name]}; kept (edit that line to change it)"
            )
    if HOOK not in lineedits.values(text, "lxc.hook.mount"):
        lines.append(f"lxc.hook.mount = {HOOK}")
    return lines, warnings


class LxcEngine:
    """One LXC container's config: the nvidia mount hook and its environment."""

    name = ENGINE

    def plan(self, options: RuntimeOptions) -> ConfigPlan:
        """Append the hook and environment lines to the container's config; never writes.

        Without ``--container`` (``install --runtime auto``) nothing is planned and the plan says
        what to run for each container found.

        :raises UsageError: for a container that does not exist.
        :raises ConfigFormatError: for a privileged container (nothing is written).
        """
        plan = ConfigPlan(engine=self.name)
        if options.container is None:
            return _advice(options, plan)
        config = config_path(options.root, options.lxcpath, options.container)
        path = rooted(options.root, config)
        old = read_optional(path)
        if old is None:
            raise UsageError(
                f"there is no LXC container {options.container} in {posixpath.dirname(posixpath.dirname(config))} ({config} does not exist)"
            )
        text = decode_utf8(old, path)
        if not idmaps(options.root, text):
            raise ConfigFormatError(
                path,
                f"the container {options.container} is privileged (no lxc.idmap): LXC's nvidia hook only works in "
                "unprivileged containers (a limit of libnvidia-container); map its ids with lxc.idmap first",
            )
        lines, warnings = wanted_lines(
            text, options.devices or DEFAULT_DEVICES, options.capabilities or DEFAULT_CAPABILITIES
        )
        plan.warnings.extend(warnings)
        if not rooted(options.root, HOOK).is_file():
            plan.warnings.append(
                f"{HOOK} does not exist under {options.root}: install lxc (it ships the hook)"
            )
        new_text, added = lineedits.append_lines(text, lines)
        plan.changes.append(FileChange(path, old, new_text.encode()))
        plan.notes.update({"container": options.container, "config": config, **lineedits.owned_notes(added)})
        plan.facts.update(_facts(new_text, options.container))
        plan.next_step = f"restart the container (lxc-stop -n {options.container}; lxc-start -n {options.container}) to get the GPUs"
        return plan

    def report(self, root: Path, runtime_name: str, config: Optional[str] = None) -> Dict[str, str]:
        """CONTAINER, UNPRIVILEGED, HOOK, NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES of the container config.

        :param config: the container's config (node path), as the last ``configure lxc`` recorded it.
        """
        if config is None:
            return {"CONTAINERS": ",".join(containers(root, default_lxcpath(root)))}
        raw = read_optional(rooted(root, config))
        if raw is None:
            return {"CONFIG": config, "MISSING": "true"}
        text = decode_utf8(raw, config)
        facts = _facts(text, posixpath.basename(posixpath.dirname(config)))
        facts["UNPRIVILEGED"] = str(bool(idmaps(root, text))).lower()
        return facts

    def check(self, root: Path, notes: Dict[str, Any]) -> Tuple[List[str], List[str]]:
        """Every container ``configure lxc`` changed: our lines, unprivileged, the hook and nvidia-container-cli."""
        passed: List[str] = []
        problems: List[str] = []
        configs = dict.fromkeys(
            str(e.notes["config"])
            for e in Journal(root).entries()
            if e.engine == ENGINE and "config" in e.notes
        )
        for config in configs:
            ok, wrong = _check_container(root, config)
            passed += ok
            problems += wrong
        if rooted(root, HOOK).is_file():
            passed.append(f"lxc: {HOOK} exists")
        else:
            problems.append(f"lxc: {HOOK} does not exist under {root} (install lxc)")
        if any(rooted(root, posixpath.join(d, CLI)).is_file() for d in CLI_DIRS):
            passed.append(f"lxc: {CLI} is on the hook's PATH")
        else:
            problems.append(
                f"lxc: {CLI} (libnvidia-container-tools) is not in {', '.join(CLI_DIRS)} under {root}"
            )
        return passed, problems


def _check_container(root: Path, config: str) -> Tuple[List[str], List[str]]:
    name = posixpath.basename(posixpath.dirname(config))
    raw = read_optional(rooted(root, config))
    if raw is None:
        return [], [f"lxc: {config} (container {name}) does not exist"]
    text = decode_utf8(raw, config)
    problems = [
        f"lxc: {name}: {config} lacks `{line}`"
        for line in wanted_lines(text, DEFAULT_DEVICES, DEFAULT_CAPABILITIES)[0]
    ]
    if environment(text).get("NVIDIA_VISIBLE_DEVICES", "") in ("", "void", "none"):
        problems.append(
            f"lxc: {name}: NVIDIA_VISIBLE_DEVICES is empty, void or none: the hook gives it no GPU"
        )
    if not idmaps(root, text):
        problems.append(f"lxc: {name} is privileged (no lxc.idmap); LXC's nvidia hook refuses to run")
    return ([] if problems else [f"lxc: container {name} has the nvidia hook and its environment"]), problems


def containers(root: Path, lxcpath: str) -> List[str]:
    """The containers in ``lxcpath`` under ``root`` (directories with a config)."""
    directory = rooted(root, lxcpath)
    if not directory.is_dir():
        return []
    return sorted(entry.name for entry in directory.iterdir() if (entry / "config").is_file())


def _advice(options: RuntimeOptions, plan: ConfigPlan) -> ConfigPlan:
    found = containers(options.root, options.lxcpath or default_lxcpath(options.root))
    where = f" --lxcpath {options.lxcpath}" if options.lxcpath else ""
    if found:
        commands = "; ".join(f"gpu-airgap configure lxc --container {name}{where}" for name in found)
        plan.next_step = f"LXC is configured per container; for each that should see the GPUs run: {commands}"
    else:
        plan.next_step = (
            f"LXC is configured per container: run gpu-airgap configure lxc --container NAME{where}"
        )
    plan.facts["CONTAINERS"] = ",".join(found)
    return plan


def _facts(text: str, container: str) -> Dict[str, str]:
    env = environment(text)
    facts = {"CONTAINER": container, "HOOK": HOOK if HOOK in lineedits.values(text, "lxc.hook.mount") else ""}
    for name in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"):
        if name in env:
            facts[name] = env[name]
    return facts


_: Engine = LxcEngine()
