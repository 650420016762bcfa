"""Which containerd the node's kubelet uses: plain ``/etc/containerd``, k3s, RKE2, MicroK8s or k0s.

Pure over a root: only files and unit files under ``--root`` are read, nothing is executed, so the
same answer comes out of ``configure``, ``install``, ``status``, ``verify``, the Ansible role and the
DaemonSet (they all call :func:`choose`).

Each distribution is told by what it leaves on disk (see ``tests/data/fixtures/distros`` for where
those files come from): k3s and RKE2 their data directory and their systemd units, MicroK8s its
snap's ``args/containerd-template.toml``, k0s ``/etc/k0s/containerd.toml`` and its units, plain
containerd ``/etc/containerd/config.toml`` or its binary. Several on one node (Docker's containerd
next to k3s's) are never resolved by guessing: :func:`choose` lists them and asks for ``--distro``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from configure.cdi.refresh import UNIT_DIRS  # systemd's search path (k3s: /etc, RKE2: /usr/local)
from configure.validate import DISTRO_CHOICES
from plumbing.errors import UsageError
from plumbing.fsutil import rooted

#: what ``--distro`` takes, in the order detection lists them
NAMES = DISTRO_CHOICES
PLAIN = NAMES[0]
MICROK8S_ARGS = "/var/snap/microk8s/current/args"


@dataclass(frozen=True)
class Distro:
    """One containerd a kubelet may use: where it reads its config, and how it picks up a change."""

    name: str  #: one of NAMES
    config: str  #: node path of the config file that containerd loads
    socket: str  #: its CRI socket
    units: Tuple[str, ...]  #: systemd units to restart after a change (empty: it reloads itself)
    evidence: Tuple[str, ...] = ()  #: the node paths that showed it (empty: chosen with --distro alone)
    #: the file the admin edits when ``config`` is generated (MicroK8s's template, k0s's drop-in dir)
    edit: Optional[str] = None

    @property
    def rancher(self) -> bool:
        """k3s and RKE2 share the agent code that generates containerd's config on every start."""
        return self.name in ("k3s", "rke2")

    @property
    def data_dir(self) -> str:
        """k3s/RKE2: the directory that holds the generated containerd config."""
        return f"/var/lib/rancher/{self.name}/agent/etc/containerd"

    def restart_hint(self) -> str:
        """What to do for containerd to read a change, as a phrase."""
        if not self.units:
            return (
                "k0s reloads containerd by itself when a drop-in changes"
                if self.name == "k0s"
                else "nothing to restart"
            )
        return "restart " + " or ".join(self.units)

    def describe(self) -> str:
        """Where its config is and why it was chosen: ``config PATH; found PATH``."""
        why = f"found {', '.join(self.evidence)}" if self.evidence else "chosen with --distro"
        return f"config {self.config}; {why}"


def _units(root: Path, names: Tuple[str, ...]) -> Tuple[str, ...]:
    """Which of the systemd units ``names`` have a unit file under ``root``."""
    return tuple(n for n in names if any(rooted(root, f"{d}/{n}.service").is_file() for d in UNIT_DIRS))


def _existing(root: Path, paths: Tuple[str, ...]) -> Tuple[str, ...]:
    return tuple(p for p in paths if rooted(root, p).exists())


def _rancher(root: Path, name: str, server: str, agent: str) -> Distro:
    base = f"/var/lib/rancher/{name}/agent/etc/containerd"
    units = _units(root, (server, agent))
    evidence = _existing(root, (base, f"/usr/local/bin/{name}", f"/usr/bin/{name}"))
    evidence += tuple(f"{u}.service" for u in units)
    # Without unit files (an image, a test root) either unit may run the agent: name both.
    return Distro(
        name, f"{base}/config.toml", "/run/k3s/containerd/containerd.sock", units or (server, agent), evidence
    )


def candidates(root: Path) -> Dict[str, Distro]:
    """Every distribution with its description, found or not (``evidence`` empty when not found)."""
    k0s_units = _units(root, ("k0sworker", "k0scontroller"))
    return {
        PLAIN: Distro(
            PLAIN,
            "/etc/containerd/config.toml",
            "/run/containerd/containerd.sock",
            ("containerd",),
            _existing(
                root, ("/etc/containerd/config.toml", "/usr/bin/containerd", "/usr/local/bin/containerd")
            ),
        ),
        "k3s": _rancher(root, "k3s", "k3s", "k3s-agent"),
        "rke2": _rancher(root, "rke2", "rke2-server", "rke2-agent"),
        "microk8s": Distro(
            "microk8s",
            f"{MICROK8S_ARGS}/containerd.toml",
            "/var/snap/microk8s/common/run/containerd.sock",
            ("snap.microk8s.daemon-containerd",),
            _existing(root, (f"{MICROK8S_ARGS}/containerd-template.toml",)),
            edit=f"{MICROK8S_ARGS}/containerd-template.toml",
        ),
        "k0s": Distro(
            "k0s",
            "/etc/k0s/containerd.toml",
            "/run/k0s/containerd.sock",
            (),
            _existing(root, ("/etc/k0s/containerd.toml", "/etc/k0s/containerd.d"))
            + tuple(f"{u}.service" for u in k0s_units),
            edit="/etc/k0s/containerd.d/nvidia.toml",
        ),
    }


def detect(root: Path) -> List[Distro]:
    """The containerd instances found under ``root``, in :data:`NAMES` order."""
    return [d for d in candidates(root).values() if d.evidence]


def choose(root: Path, wanted: Optional[str] = None) -> Distro:
    """The containerd to configure: ``wanted`` (``--distro``), else the only one found, else plain containerd.

    A Docker-only containerd (``/usr/bin/containerd`` but no config) next to a distribution does
    not count as a second kubelet containerd; a real ``/etc/containerd/config.toml`` does.

    :raises UsageError: for an unknown ``--distro``, or when several are found (they are listed).
    """
    found = candidates(root)
    if wanted is not None:
        if wanted not in found:
            raise UsageError(f"--distro must be one of {', '.join(NAMES)}, not {wanted!r}")
        return found[wanted]
    present = [d for d in found.values() if d.evidence]
    distros = [d for d in present if d.name != PLAIN]
    plain = found[PLAIN]
    if distros and "/etc/containerd/config.toml" in plain.evidence:
        distros.insert(0, plain)
    if len(distros) > 1:
        listed = "; ".join(d.describe() for d in distros)
        raise UsageError(
            f"several containerd instances on this node: {listed}; choose one with --distro "
            + "|".join(d.name for d in distros)
        )
    return distros[0] if distros else plain
