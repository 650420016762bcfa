"""NVIDIA's CDI refresh units on a root: present, enabled, and where the service writes its spec.

From toolkit 1.18 on, ``nvidia-container-toolkit-base`` ships ``nvidia-cdi-refresh.path`` and
``.service`` (where: :mod:`configure.releases`). Enabled, the service runs ``nvidia-ctk cdi
generate`` at boot and the path unit starts it again when the driver or nvidia-ctk changes; it
writes ``NVIDIA_CTK_CDI_OUTPUT_FILE_PATH`` (``/var/run/cdi/nvidia.yaml`` unless the env file or a
drop-in says otherwise).

Everything here is read from files under the root, as ``systemctl --root R is-enabled`` reads
them; nothing runs and no systemd is asked (the root may be an image, or the node may not run
systemd now). The rules we follow, from systemd.unit(5), systemctl(1) and systemd.preset(5):

- the unit file in effect is the first one on the search path (``/etc`` before ``/run`` before
  the vendor directories); one that is a link to ``/dev/null`` (or empty) is *masked*;
- a unit is *enabled* when a link with its name sits in a ``*.wants`` or ``*.requires`` directory
  under ``/etc/systemd/system`` or ``/run/systemd/system`` (what ``systemctl enable`` and
  ``deb-systemd-helper enable`` create); otherwise *disabled*;
- the preset (what ``systemctl preset`` would do) is the first matching ``enable``/``disable``
  line across the preset files sorted by file name, a file in ``/etc`` hiding a same-named one in
  the vendor directories; no matching line means enable.

From 1.20.1 on -base also ships the udev rule ``99-nvidia-cdi-refresh.rules`` (NVIDIA/nvidia-container-toolkit
``deployments/udev/``, read at commit 8269969f67c6e59e01982d2d586ae10483cb61e2, which added it):
``ACTION=="add", SUBSYSTEM=="module", KERNEL=="nvidia|nvidia_current"`` with
``ENV{SYSTEMD_WANTS}+="nvidia-cdi-refresh.service"``. udev starts a wanted unit whether or not it is
enabled (only a mask stops it), so with the rule in effect the service refreshes the spec whenever
the driver loads: a CDI source of its own beside the units. The rule in effect is the first file
of that name on udev's rules path (udev(7): ``/etc`` before ``/run`` before the vendor directories;
one linked to ``/dev/null`` or empty disables it), and it counts only if it still wants the service.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from configure.changes import read_optional
from configure.releases import (
    REFRESH_ENV_FILE,
    REFRESH_OUTPUT,
    REFRESH_SERVICE_UNIT,
    REFRESH_UDEV_RULE,
    REFRESH_UNITS,
)
from plumbing.fsutil import is_live_root, rooted, rooted_or_none, safe_join

#: systemd's unit search path for the system manager, highest priority first
UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
)
#: the directories whose ``*.wants``/``*.requires`` links enable a unit
ENABLE_DIRS = ("/etc/systemd/system", "/run/systemd/system")
PRESET_DIRS = (
    "/etc/systemd/system-preset",
    "/run/systemd/system-preset",
    "/usr/local/lib/systemd/system-preset",
    "/lib/systemd/system-preset",
    "/usr/lib/systemd/system-preset",
)
OUTPUT_VARIABLE = "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"
#: udev's rules path, highest priority first (udev(7); /lib on systems without the merged /usr)
UDEV_RULE_DIRS = (
    "/etc/udev/rules.d",
    "/run/udev/rules.d",
    "/usr/local/lib/udev/rules.d",
    "/usr/lib/udev/rules.d",
    "/lib/udev/rules.d",
)


@dataclass(frozen=True)
class UnitState:
    """One unit as ``systemctl --root R is-enabled`` would see it."""

    name: str
    path: Optional[str]  #: node path of the unit file in effect; None when there is none
    state: str  #: enabled | disabled | masked | not-found
    preset: str  #: enable | disable: what ``systemctl preset`` would make of it
    preset_file: Optional[str] = None  #: node path of the preset file whose line decided
    links: Tuple[str, ...] = ()  #: node paths of the enablement links

    def to_dict(self) -> Dict[str, Any]:
        """The ``--json`` form."""
        return {
            "path": self.path,
            "state": self.state,
            "preset": self.preset,
            "preset_file": self.preset_file,
            "links": list(self.links),
        }


@dataclass(frozen=True)
class RefreshUnits:
    """nvidia-cdi-refresh on one root: its two units and the spec its service writes."""

    units: Tuple[UnitState, ...]
    output: str = REFRESH_OUTPUT  #: node path of the spec the service writes
    output_from: str = "the unit's default"  #: where ``output`` was set
    udev_rule: Optional[str] = None  #: node path of the udev rule in effect that starts the service
    notes: Tuple[str, ...] = field(default=(), compare=False)

    def unit(self, name: str) -> UnitState:
        """The state of ``name`` (one of :data:`REFRESH_UNITS`)."""
        return next(u for u in self.units if u.name == name)

    @property
    def present(self) -> bool:
        """Both unit files are on the root."""
        return all(u.state != "not-found" for u in self.units)

    @property
    def active(self) -> bool:
        """The units will write the spec: both present, the service not masked, and one unit enabled or the udev rule.

        The service enabled runs at boot; the path unit enabled starts it on driver changes; the
        udev rule (1.20.1+) starts it when the module loads, enabled or not. A masked service never runs.
        """
        service = self.unit(REFRESH_SERVICE_UNIT)
        if not self.present or service.state == "masked":
            return False
        return self.udev_rule is not None or any(u.state == "enabled" for u in self.units)

    @property
    def when(self) -> str:
        """When the service writes the spec: ``at boot and when the driver changes``, or, by the udev rule alone, on load."""
        if any(u.state == "enabled" for u in self.units):
            return "at boot and when the driver changes"
        return f"when the driver loads (udev rule {self.udev_rule})"

    @property
    def stop_hint(self) -> str:
        """How to stop it writing: the units enabled are disabled; the udev rule needs the service masked."""
        if self.udev_rule:
            return f"mask {REFRESH_SERVICE_UNIT} to stop it"
        return "disable its units to stop it"

    def describe(self) -> str:
        """One phrase: what the units will do on this node."""
        if not self.present:
            missing = [u.name for u in self.units if u.state == "not-found"]
            return f"no CDI refresh units ({', '.join(missing)} not found)"
        states = ", ".join(f"{u.name} {u.state}" for u in self.units)
        if self.active:
            rule = f", udev rule {self.udev_rule}" if self.udev_rule and "udev" not in self.when else ""
            return f"nvidia-cdi-refresh writes {self.output} {self.when} ({states}{rule})"
        preset = (
            " (the vendor preset would enable them)" if all(u.preset == "enable" for u in self.units) else ""
        )
        return f"the CDI refresh units are installed but will not run ({states}){preset}"

    def to_dict(self) -> Dict[str, Any]:
        """The ``--json`` form."""
        return {
            "present": self.present,
            "active": self.active,
            "output": self.output,
            "output_from": self.output_from,
            "udev_rule": self.udev_rule,
            "units": {u.name: u.to_dict() for u in self.units},
        }


def detect_refresh(root: Path) -> RefreshUnits:
    """Read nvidia-cdi-refresh's units, enablement, preset and output path under ``root``."""
    presets = _preset_rules(root)
    units = tuple(_unit_state(root, name, presets) for name in REFRESH_UNITS)
    service = next(u for u in units if u.name == REFRESH_SERVICE_UNIT)
    output, output_from = (
        _service_output(root, service.path) if service.path else (REFRESH_OUTPUT, "the unit's default")
    )
    return RefreshUnits(units=units, output=output, output_from=output_from, udev_rule=udev_rule(root))


def udev_rule(root: Path) -> Optional[str]:
    """Node path of NVIDIA's refresh rule in effect under ``root`` when it starts the service; else None."""
    found = _in_effect(root, UDEV_RULE_DIRS, REFRESH_UDEV_RULE)
    if found is None or found[1] is None:
        return None  # none, or the admin disabled it (udev(7))
    text = (read_optional(found[1]) or b"").decode("utf-8", "replace")
    wants = [
        line
        for line in text.splitlines()
        if not line.lstrip().startswith("#") and "SYSTEMD_WANTS" in line and REFRESH_SERVICE_UNIT in line
    ]
    return found[0] if wants else None  # the first file of the name hides the others, wanted or not


def _in_effect(root: Path, directories: Tuple[str, ...], name: str) -> Optional[Tuple[str, Optional[Path]]]:
    """The first ``name`` on a search path: ``(node path, file)``; the file is None when masked (``/dev/null``, empty).

    A dangling link is skipped; None when no directory holds the name.
    """
    for directory in directories:
        candidate = f"{directory}/{name}"
        link = _node(root, candidate)
        if not os.path.lexists(link):
            continue
        if link.is_symlink() and str(link.readlink()) == "/dev/null":
            return candidate, None
        real = rooted_or_none(root, candidate)
        if real is None or not real.is_file():
            continue
        return candidate, (None if real.stat().st_size == 0 else real)
    return None


def _node(root: Path, node_path: str) -> Path:
    """``node_path`` under ``root`` without following its last component (to see links themselves)."""
    return Path(node_path) if is_live_root(root) else safe_join(root, node_path.lstrip("/"))


def _unit_state(root: Path, name: str, presets: List[Tuple[str, str, str]]) -> UnitState:
    preset, preset_file = _preset_for(name, presets)
    found = _in_effect(root, UNIT_DIRS, name)
    if found is None:
        return UnitState(name, None, "not-found", preset, preset_file)
    if found[1] is None:
        return UnitState(name, found[0], "masked", preset, preset_file)
    links = _enable_links(root, name)
    return UnitState(name, found[0], "enabled" if links else "disabled", preset, preset_file, links)


def _enable_links(root: Path, name: str) -> Tuple[str, ...]:
    found: List[str] = []
    for directory in ENABLE_DIRS:
        base = rooted_or_none(root, directory)
        if base is None or not base.is_dir():
            continue
        for sub in sorted(base.iterdir()):
            if sub.name.endswith((".wants", ".requires")) and os.path.lexists(sub / name):
                found.append(f"{directory}/{sub.name}/{name}")
    return tuple(found)


def _preset_rules(root: Path) -> List[Tuple[str, str, str]]:
    """Every ``(verb, pattern, file)`` line of the preset files, in the order systemd applies them."""
    files: Dict[str, str] = {}
    for directory in PRESET_DIRS:
        base = rooted_or_none(root, directory)
        if base is None or not base.is_dir():
            continue
        for entry in base.iterdir():
            if entry.name.endswith(".preset") and entry.name not in files:
                files[entry.name] = f"{directory}/{entry.name}"
    rules: List[Tuple[str, str, str]] = []
    for file_name in sorted(files):
        raw = read_optional(rooted(root, files[file_name])) or b""
        for line in raw.decode("utf-8", "replace").splitlines():
            words = line.split()
            if (
                len(words) >= 2
                and words[0] in ("enable", "disable")
                and not line.lstrip().startswith(("#", ";"))
            ):
                rules.append((words[0], words[1], files[file_name]))
    return rules


def _preset_for(name: str, rules: List[Tuple[str, str, str]]) -> Tuple[str, Optional[str]]:
    for verb, pattern, source in rules:
        if fnmatch.fnmatchcase(name, pattern):
            return verb, source
    return "enable", None  # systemd.preset(5): a unit no line matches is enabled


def _service_output(root: Path, unit_path: str) -> Tuple[str, str]:
    """Where the service writes: the env file beats ``Environment=``; ``--output`` in ExecStart beats both."""
    output, origin = REFRESH_OUTPUT, "the unit's default"
    env_files: List[str] = []
    for path in [unit_path, *_drop_ins(root, REFRESH_SERVICE_UNIT)]:
        raw = read_optional(rooted(root, path)) or b""
        for key, value in _unit_lines(raw.decode("utf-8", "replace")):
            if key == "Environment":
                for word in _split(value):
                    if word.startswith(f"{OUTPUT_VARIABLE}="):
                        output, origin = word.partition("=")[2], path
            elif key == "EnvironmentFile":
                env_files.append(value.lstrip("-").strip())
            elif key == "ExecStart" and "--output" in value:
                words = _split(value)
                for i, word in enumerate(words):
                    if word.startswith("--output="):
                        return word.partition("=")[2], path
                    if word == "--output" and i + 1 < len(words):
                        return words[i + 1], path
    for env_file in env_files or [REFRESH_ENV_FILE]:
        from_file = _env_file_value(root, env_file, OUTPUT_VARIABLE)
        if from_file:
            output, origin = from_file, env_file
    return output, origin


def _drop_ins(root: Path, name: str) -> List[str]:
    found: Dict[str, str] = {}
    for directory in reversed(UNIT_DIRS):  # /etc last, so its same-named drop-in wins
        base = rooted_or_none(root, f"{directory}/{name}.d")
        if base is not None and base.is_dir():
            found.update(
                {e.name: f"{directory}/{name}.d/{e.name}" for e in base.iterdir() if e.name.endswith(".conf")}
            )
    return [found[key] for key in sorted(found)]


def _unit_lines(text: str) -> List[Tuple[str, str]]:
    out: List[Tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def _split(value: str) -> List[str]:
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def _env_file_value(root: Path, env_file: str, key: str) -> Optional[str]:
    path = rooted_or_none(root, env_file)
    raw = read_optional(path) if path is not None else None
    value: Optional[str] = None
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        line = line.strip()
        if line.startswith(f"{key}="):
            value = line.partition("=")[2].strip().strip("\"'")
    return value
