"""Podman: GPUs through CDI first, NVIDIA's OCI hook for older podman or when asked.

Podman has no runtime entry to register and no daemon to restart; what it reads is files:

* **CDI** (podman 4.1 and later, ``podman run --device nvidia.com/gpu=all``): podman loads every
  spec in ``/etc/cdi`` and ``/var/run/cdi``. A valid NVIDIA spec in either place is used as it is:
  ours, or the one ``nvidia-cdi-refresh`` keeps in ``/var/run/cdi/nvidia.yaml``. Without one, the
  spec is written to ``/etc/cdi/nvidia.yaml`` as ``configure cdi`` would write it (nvidia-ctk on
  the node, else the device nodes), journaled under ``podman`` so that ``revert`` removes it again.
* **Hook** (``--hook``, or a podman older than 4.1): the OCI hook file running
  ``nvidia-container-runtime-hook prestart``, in the hooks directory podman reads:
  ``/usr/share/containers/oci/hooks.d`` (containers.conf's default; podman 4.3 reads no other,
  whatever podman(1) says of ``/etc/containers/oci/hooks.d``), or the last (strongest) directory of
  a ``hooks_dir`` that containers.conf sets. ``--hooks-dir`` names the directory outright; one
  podman does not read is written with a warning and fails ``verify``.
* **Rootless** (``--user NAME``): that user's ``~/.config``, see :mod:`configure.podman.rootless`.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from configure import tomledit
from configure.cdi import spec as cdi_spec
from configure.cdi.inventory import find_specs, stale_reasons
from configure.cdi.lifecycle import driver_version
from configure.cdi.node import plan_static_spec
from configure.cdi.refresh import detect_refresh
from configure.changes import json_change, read_optional
from configure.crio import DEFAULT_PATH, HOOK_BINARY, hook_config, hook_problems
from configure.engine import ConfigPlan, Engine, RuntimeOptions
from configure.nodefacts import VersionProbe, podman_version
from configure.podman import rootless
from configure.podman.rootless import User, lookup_user, user_conf_files
from plumbing.errors import UsageError
from plumbing.fsutil import rooted, rooted_or_none
from plumbing.textio import decode_utf8

ENGINE = "podman"
HOOK_NAME = "oci-nvidia-hook.json"
#: what podman reads unless containers.conf sets hooks_dir (seen in its debug log: "reading hooks from")
DEFAULT_HOOKS_DIRS = ("/usr/share/containers/oci/hooks.d",)
#: containers.conf files in the order podman reads them (later keys win); drop-ins follow each
CONTAINERS_CONFS = ("/usr/share/containers/containers.conf", "/etc/containers/containers.conf")
#: the directories of the hook's PATH (:func:`configure.crio.hook_config`)
HOOK_SEARCH_PATH = tuple(DEFAULT_PATH.split(":"))
#: the oldest podman with CDI devices (``--device vendor/class=name``)
CDI_SINCE = (4, 1)
#: where podman loads specs from, weakest first (``/var/run/cdi`` overrides ``/etc/cdi``)
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


def containers_conf(root: Path, files: Sequence[str] = CONTAINERS_CONFS) -> Dict[str, Any]:
    """The merged containers.conf under ``root``: each file, then its ``.d`` drop-ins, later keys winning."""
    merged: Dict[str, Any] = {}
    for name in files:
        paths = [rooted(root, name)]
        drop_ins = rooted(root, name + ".d")
        if drop_ins.is_dir():  # each drop-in through rooted(): a link's target is a node path
            found = (
                rooted_or_none(root, f"{name}.d/{p.name}")
                for p in sorted(drop_ins.iterdir())
                if p.suffix == ".conf"
            )
            paths += [p for p in found if p is not None and p.is_file()]
        for path in paths:
            raw = read_optional(path)
            if raw is None:
                continue
            for section, values in tomledit.parse_text(decode_utf8(raw, path), path).unwrap().items():
                if isinstance(values, dict):
                    merged.setdefault(section, {}).update(values)
    return merged


def hooks_dirs(root: Path, user: Optional[User] = None) -> Tuple[str, ...]:
    """The hooks directories root's podman (or ``user``'s) reads, weakest first."""
    configured = (
        containers_conf(root, user_conf_files(CONTAINERS_CONFS, user)).get("engine", {}).get("hooks_dir")
    )
    if isinstance(configured, list) and configured and all(isinstance(d, str) for d in configured):
        return tuple(configured)
    return DEFAULT_HOOKS_DIRS


def spec_in_effect(root: Path) -> Tuple[Optional[str], List[str]]:
    """The NVIDIA CDI spec podman takes the devices from (the strongest usable one), and what is wrong with the others.

    Resolved as a CDI registry resolves it (:func:`configure.cdi.inventory.find_specs`); a spec in
    effect that is stale (a device node it names is gone) is not usable.

    :returns: ``(node path or None, ["PATH: problem", ...])``.
    """
    specs = find_specs(root, cdi_spec.KIND)
    problems = [f"{spec.path}: {p}" for spec in specs.invalid for p in spec.problems]
    duplicate = specs.duplicate_problem()
    if duplicate:
        problems.append(duplicate)
    driver = driver_version(root)
    found: Optional[str] = None
    for spec in specs.in_effect:
        stale = stale_reasons(root, spec, driver)
        problems.extend(f"{spec.path}: {p}" for p in stale)
        if not stale:
            found = spec.path
    return found, problems


class PodmanEngine:
    """Podman: the CDI spec it loads, or the OCI hook file in a hooks directory it reads."""

    name = ENGINE

    def __init__(
        self, version: VersionProbe = podman_version, generator: Optional[cdi_spec.SpecGenerator] = None
    ) -> None:
        self._version = version
        self._generator = generator

    def plan(self, options: RuntimeOptions) -> ConfigPlan:
        """CDI when asked (and podman has it), else the hook; never writes.

        ``options.cdi`` is what ``configure podman`` always asks and what ``install`` asks when it
        writes the spec; without it (``install`` on a node without a driver) the hook is used.
        """
        plan = ConfigPlan(engine=self.name)
        if options.user is not None:
            user = lookup_user(options.root, options.user)
            plan.notes["user"] = user.name
        if options.set_as_default:
            plan.warnings.append(
                "--set-as-default has no meaning for podman: it has no default runtime to change"
            )
        version = self._version(options.root)
        old = version is not None and version < CDI_SINCE
        if version is not None and old and not options.hook:
            plan.warnings.append(
                f"podman {version[0]}.{version[1]} has no CDI devices (4.1 and later do); using the OCI hook"
            )
        if options.hook or old or not options.cdi:
            return self._plan_hook(options, plan)
        return self._plan_cdi(options, plan)

    def _plan_cdi(self, options: RuntimeOptions, plan: ConfigPlan) -> ConfigPlan:
        plan.notes.update({"mode": "cdi"})
        plan.facts["MODE"] = "cdi"
        plan.next_step = (
            f"podman containers get the GPUs with --device {cdi_spec.KIND}=all (or {cdi_spec.KIND}=0, ...)"
        )
        found, problems = spec_in_effect(options.root)
        if found is not None:
            plan.facts["CDI_SPEC"] = found
            plan.warnings.extend(f"ignored: {p}" for p in problems)
            return plan
        refresh = detect_refresh(options.root)
        if refresh.active:
            # toolkit 1.18+: the refresh units write the spec (at boot, with a driver); a static one would be a second
            plan.facts["CDI_SPEC"] = refresh.output
            plan.warnings.append(f"no static spec written: {refresh.describe()}")
            return plan
        spec = plan_static_spec(options.root, cdi_spec.CDI_SPEC, generator=self._generator)
        plan.changes.extend(spec.changes)
        plan.warnings.extend(spec.warnings)
        plan.facts.update({"CDI_SPEC": cdi_spec.CDI_SPEC, "DEVICES": spec.facts.get("DEVICES", "")})
        return plan

    def _plan_hook(self, options: RuntimeOptions, plan: ConfigPlan) -> ConfigPlan:
        if options.hooks_dir is not None and not options.hooks_dir.startswith("/"):
            raise UsageError(f"--hooks-dir must be an absolute directory, not {options.hooks_dir!r}")
        hook_path = posixpath.join(posixpath.dirname(options.runtime_path), HOOK_BINARY)
        if options.user is not None:
            return self._plan_user_hook(options, options.user, hook_path, plan)
        directories = hooks_dirs(options.root)
        directory = options.hooks_dir or directories[-1]
        if directory not in directories:
            plan.warnings.append(
                f"podman reads hooks from {', '.join(directories)}; {directory} is read only with --hooks-dir {directory}"
            )
        hook_file = posixpath.join(directory, HOOK_NAME)
        plan.changes.append(json_change(rooted(options.root, hook_file), hook_config(hook_path)))
        plan.notes.update({"mode": "hook", "hook_file": hook_file, "hook_path": hook_path})
        plan.facts.update({"MODE": "hook", "HOOK": hook_file, "HOOK_PATH": hook_path})
        plan.next_step = (
            "podman containers started with NVIDIA_VISIBLE_DEVICES=all (or 0, 1, ...) get the GPUs"
        )
        return plan

    def _plan_user_hook(
        self, options: RuntimeOptions, name: str, hook_path: str, plan: ConfigPlan
    ) -> ConfigPlan:
        if options.hooks_dir is not None:
            raise UsageError(
                "--hooks-dir and --user do not go together: a user's hook goes to ~/.config/containers/oci/hooks.d"
            )
        user = lookup_user(options.root, name)
        changes, hook_file = rootless.plan_hook(
            options.root, user, hook_config(hook_path), hooks_dirs(options.root, user)
        )
        plan.changes.extend(changes)
        plan.notes.update({"mode": "hook", "hook_file": hook_file, "hook_path": hook_path})
        plan.facts.update({"MODE": "hook", "USER": user.name, "HOOK": hook_file, "HOOK_PATH": hook_path})
        plan.next_step = f"{user.name}'s podman containers started with NVIDIA_VISIBLE_DEVICES=all (or 0, 1, ...) get the GPUs"
        return plan

    def report(self, root: Path, runtime_name: str, config: Optional[str] = None) -> Dict[str, str]:
        """MODE (cdi when a valid spec is in effect, else hook when our hook file is there), CDI_SPEC, HOOK.

        :param config: the hook file the last ``configure podman --hook`` wrote (node path).
        """
        facts: Dict[str, str] = {}
        for directory in (*hooks_dirs(root), *([posixpath.dirname(config)] if config else [])):
            hook_file = posixpath.join(directory, HOOK_NAME)
            raw = read_optional(rooted(root, hook_file))
            if raw is not None:
                facts.update({"HOOK": hook_file, "HOOK_PATH": _hook_binary(raw)})
        found, _ = spec_in_effect(root)
        if found is not None:
            facts["CDI_SPEC"] = found
        facts["MODE"] = "cdi" if found else ("hook" if "HOOK" in facts else "none")
        return facts

    def check(self, root: Path, notes: Dict[str, Any]) -> Tuple[List[str], List[str]]:
        """What ``verify`` checks for podman: the spec in effect, or the hook file and its binary."""
        user = lookup_user(root, str(notes["user"])) if notes.get("user") else None
        if notes.get("mode") == "hook":
            hook_file = str(notes.get("hook_file", ""))
            return _hook_checks(root, hook_file, str(notes.get("hook_path", "")), user)
        found, problems = spec_in_effect(root)
        if found is None:
            refresh = detect_refresh(root)
            later = (
                f" (nvidia-cdi-refresh writes {refresh.output} at boot; start nvidia-cdi-refresh.service now)"
                if refresh.active
                else ""
            )
            return [], [
                f"podman: no usable {cdi_spec.KIND} CDI spec in {' or '.join(SPEC_DIRS)}{later}",
                *(f"podman: {p}" for p in problems),
            ]
        passed = [f"podman: CDI devices {cdi_spec.KIND}=... come from {found}"]
        if user is None:
            return passed, []
        wrong = [f"podman: {p}" for p in _user_cdi_problems(root, user, found)]
        return (passed if wrong else [*passed, f"podman: {user.name} can use them"]), wrong


def _user_cdi_problems(root: Path, user: User, spec: str) -> List[str]:
    """What keeps ``user``'s podman from the devices of ``spec``: their own cdi_spec_dirs, device node modes."""
    problems: List[str] = []
    dirs = (
        containers_conf(root, user_conf_files(CONTAINERS_CONFS, user)).get("engine", {}).get("cdi_spec_dirs")
    )
    if isinstance(dirs, list) and posixpath.dirname(spec) not in dirs:
        problems.append(
            f"{user.path(rootless.USER_CONF)} sets cdi_spec_dirs without {posixpath.dirname(spec)}"
        )
    data, _ = cdi_spec.parse_spec(read_optional(rooted(root, spec)) or b"")
    nodes = [n.get("hostPath") or n.get("path") for e in _edits(data) for n in e.get("deviceNodes") or []]
    problems.extend(rootless.device_problems(root, user, [str(n) for n in dict.fromkeys(nodes) if n]))
    return problems


def _edits(data: Any) -> List[Dict[str, Any]]:
    if not isinstance(data, dict):
        return []
    edits = [
        data.get("containerEdits") or {},
        *((d.get("containerEdits") or {}) for d in data.get("devices") or [] if isinstance(d, dict)),
    ]
    return [e for e in edits if isinstance(e, dict)]


def _hook_checks(
    root: Path, hook_file: str, hook_path: str, user: Optional[User] = None
) -> Tuple[List[str], List[str]]:
    raw = read_optional(rooted(root, hook_file)) if hook_file else None
    if raw is None:
        return [], [f"podman: the OCI hook {hook_file or '(none)'} does not exist"]
    passed: List[str] = []
    problems = [f"podman: {hook_file}: {p}" for p in hook_problems(raw)]
    if not problems:
        passed.append(f"podman: the OCI hook {hook_file} is valid")
    if not hook_path.startswith("/") or not rooted(root, hook_path).is_file():
        problems.append(f"podman: the hook binary {hook_path or '(none)'} does not exist under {root}")
    else:
        passed.append(f"podman: {hook_path} exists")
    if posixpath.dirname(hook_file) not in hooks_dirs(root, user):
        problems.append(f"podman: {posixpath.dirname(hook_file)} is not a hooks directory podman reads")
    # the hook runs nvidia-container-cli (libnvidia-container-tools) found on its PATH: without it every GPU container fails
    if not any(rooted(root, posixpath.join(d, "nvidia-container-cli")).is_file() for d in HOOK_SEARCH_PATH):
        problems.append(
            f"podman: nvidia-container-cli, which the hook runs, is not in {', '.join(HOOK_SEARCH_PATH)} under {root}"
        )
    return passed, problems


def _hook_binary(raw: bytes) -> str:
    try:
        data = json.loads(raw)
    except ValueError:
        return ""
    hook = data.get("hook") if isinstance(data, dict) else None
    return str(hook.get("path", "")) if isinstance(hook, dict) else ""


_: Engine = PodmanEngine()
