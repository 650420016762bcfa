"""``configure containerd`` on every kind of node: plain containerd, k3s, RKE2, MicroK8s, k0s.

:class:`DistroContainerdEngine` is the ``containerd`` of :mod:`configure.engines`. It picks the
containerd the kubelet uses (:func:`configure.distros.detection.choose`: detected, or ``--distro``), refuses a
node whose runtime the GPU Operator manages (:mod:`configure.distros.operator`), and then writes where that
distribution reads, the way it documents:

* plain containerd: :class:`configure.containerd.engine.ContainerdEngine`, unchanged;
* k3s / RKE2: :mod:`configure.distros.rancher` (usually nothing; never the generated config);
* MicroK8s: its ``args/containerd-template.toml``, edited in place (the snap renders
  ``args/containerd.toml`` from it with ``sed`` when its containerd service starts);
* k0s: a drop-in ``/etc/k0s/containerd.d/nvidia.toml`` (k0s's own ``containerd.toml`` imports the
  directory and k0s reloads containerd when it changes); config version 3 from k0s 1.36.

Every plan says which distribution was chosen and what to restart (facts ``DISTRO``, ``RESTART``;
notes ``distro``, ``restart_units``), and ``report`` reads back what that containerd will load.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional

from configure import driverroot, tomledit
from configure.changes import read_optional
from configure.containerd.engine import CRI_PLUGIN, ContainerdEngine, config_version, describe
from configure.containerd.imports import ConfigFile, load_chain
from configure.distros import operator, rancher
from configure.distros.detection import PLAIN, Distro, candidates, choose
from configure.engine import ConfigPlan, RuntimeOptions
from configure.nodefacts import KubeletProbe, VersionProbe, containerd_version, kubelet_cgroup_driver
from plumbing.errors import ConfigFormatError
from plumbing.fsutil import rooted

#: what MicroK8s's wrapper substitutes into its template (run-containerd-with-args, default values)
MICROK8S_VARS = {
    "${SNAPSHOTTER}": "overlayfs",
    "${RUNTIME}": "runc",
    "${RUNTIME_TYPE}": "io.containerd.runc.v2",
    "${SNAP_DATA}": "/var/snap/microk8s/current",
    "${SNAP_COMMON}": "/var/snap/microk8s/common",
}


def microk8s_render(text: str) -> str:
    """The config MicroK8s's containerd service writes from its template (the ``sed`` of its wrapper)."""
    for variable, value in MICROK8S_VARS.items():
        text = text.replace(variable, value)
    return text


class DistroContainerdEngine:
    """containerd wherever the kubelet's containerd reads its config (see the module docstring)."""

    name = "containerd"

    def __init__(
        self,
        distro: Optional[str] = None,
        version_probe: VersionProbe = containerd_version,
        kubelet_probe: KubeletProbe = kubelet_cgroup_driver,
    ) -> None:
        self.distro = distro
        self.plain = ContainerdEngine(version_probe, kubelet_probe)

    def choose(self, root: Path, wanted: Optional[str] = None, config: Optional[str] = None) -> Distro:
        """``--distro``, else the distribution whose file ``config`` is, else detection."""
        wanted = wanted or self.distro
        if config is not None:
            found = candidates(root)
            for distro in found.values():
                if config in (distro.config, distro.edit) and wanted in (None, distro.name):
                    return distro
            if wanted in (None, PLAIN):
                return replace(found[PLAIN], config=config)
        return choose(root, wanted)

    def plan(self, options: RuntimeOptions) -> ConfigPlan:
        """Choose the containerd, refuse a GPU Operator node (unless --force), then plan its files."""
        distro = self.choose(options.root, options.distro, options.config)
        taken_over = operator.refuse_if_managed(options.root, distro, options.force)
        if distro.rancher:
            plan = rancher.plan(distro, options, ConfigPlan(engine=self.name))
        elif distro.name == "microk8s":
            plan = self._microk8s(distro, options)
        elif distro.name == "k0s":
            plan = self._k0s(distro, options)
        else:
            plan = self.plain.plan(replace(options, config=distro.config))
        # plain containerd is just "containerd", not "the containerd of containerd"
        which = "containerd" if distro.name == PLAIN else f"the containerd of {distro.name}"
        plan.warnings[:0] = [f"using {which} ({distro.describe()})", *taken_over]
        driverroot.plan_driver_root(
            options.root, plan
        )  # the Operator's driver container: the toolkit looks there
        plan.facts.update(DISTRO=distro.name, RESTART=distro.restart_hint())
        plan.notes.update(distro=distro.name, restart_units=list(distro.units))
        return plan

    def _microk8s(self, distro: Distro, options: RuntimeOptions) -> ConfigPlan:
        template = distro.edit or ""
        plan = self.plain.plan(replace(options, config=template, drop_in=None, no_drop_in=True))
        # The template's default runtime is the wrapper's ${RUNTIME}; say what it becomes.
        plan.warnings = [w for w in plan.warnings if "${" not in w]
        previous = str(plan.notes.get("previous_default", "runc"))
        plan.notes["previous_default"] = microk8s_render(previous)
        plan.facts = self.report(options.root, options.runtime_name, template, rendered=plan.changes[0].new)
        return plan

    def _k0s(self, distro: Distro, options: RuntimeOptions) -> ConfigPlan:
        drop_in = options.drop_in or distro.edit
        plan = self.plain.plan(replace(options, config=distro.config, drop_in=drop_in, no_drop_in=False))
        main = rooted(options.root, distro.config)
        if any(change.path == main and change.changed for change in plan.changes):
            raise ConfigFormatError(
                main, "k0s manages this file; its import of /etc/k0s/containerd.d/*.toml is missing"
            )
        plan.facts.update(
            _deep_facts(
                options.root, distro.config, options.runtime_name, {drop_in or "": plan.changes[0].new}
            )
        )
        return plan

    def report(
        self, root: Path, runtime_name: str, config: Optional[str] = None, *, rendered: Optional[bytes] = None
    ) -> Dict[str, str]:
        """What the chosen containerd will load, with ``DISTRO``, ``RESTART`` and ``OWNER``."""
        distro = self.choose(root, None, config)
        if distro.rancher:
            facts = rancher.report(root, distro, runtime_name)
            problems = rancher.template_problems(root, distro)
            if problems:
                facts["TEMPLATE_PROBLEMS"] = "; ".join(problems)
        elif distro.name == "microk8s":
            path = rooted(root, distro.edit or "")
            raw = rendered if rendered is not None else read_optional(path)
            if raw is None:
                raise ConfigFormatError(path, "does not exist; is MicroK8s installed under this root?")
            data = tomledit.parse_text(microk8s_render(raw.decode()), path).unwrap()
            version = config_version(path, None, 2) if not data else int(data.get("version", 1))
            facts = describe([ConfigFile(distro.config, data)], CRI_PLUGIN[version], version, runtime_name)
        elif distro.name == "k0s":
            facts = _deep_facts(root, distro.config, runtime_name, {})
        else:
            facts = self.plain.report(root, runtime_name, distro.config)
        facts.update(
            DISTRO=distro.name, RESTART=distro.restart_hint(), OWNER=operator.owner(root, distro) or ""
        )
        return facts


def _deep_facts(root: Path, config: str, runtime_name: str, pending: Dict[str, bytes]) -> Dict[str, str]:
    """Facts for a containerd 2 config whose imports merge key by key (k0s); ``pending`` overrides files."""
    path = rooted(root, config)
    raw = read_optional(path)
    if raw is None:
        raise ConfigFormatError(path, "does not exist; start k0s once so it writes it")
    data = tomledit.parse(path, raw).unwrap()
    version = config_version(path, tomledit.parse(path, raw), 2)
    chain: List[ConfigFile] = []
    for item in load_chain(root, config, data, ours=next(iter(pending), None)):
        override = pending.get(item.path)
        content: Dict[str, Any] = (
            tomledit.parse(path, override).unwrap() if override is not None else item.data
        )
        chain.append(ConfigFile(item.path, content))
    plugin = CRI_PLUGIN[version]
    merged = (
        [ConfigFile(config, {"plugins": {plugin: rancher.merged_cri(chain, plugin)}})]
        if version == 3
        else chain
    )
    return describe(merged, plugin, version, runtime_name)
