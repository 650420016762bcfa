"""Real package managers confined to a scratch directory: ``apt-get`` and ``dnf`` that change nothing on the host.

Used by the upstream, bundle and publish tests to show that what we serve is what real clients accept.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.upstream import stop_agent


def apt(sandbox: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """apt-get confined to ``sandbox``: its own state, cache, sources, config parts; no lock on the host."""
    opts = {
        "Dir::State": sandbox / "state",
        "Dir::State::status": sandbox / "state/status",
        "Dir::Cache": sandbox / "cache",
        "Dir::Etc::SourceList": sandbox / "sources.list",
        "Dir::Etc::SourceParts": sandbox / "sources.list.d",
        "Dir::Etc::Parts": sandbox / "apt.conf.d",
        "Dir::Etc::Preferences": sandbox / "preferences",
        "Dir::Etc::PreferencesParts": sandbox / "preferences.d",
        "Debug::NoLocking": "1",
        "APT::Sandbox::User": "root" if os.geteuid() == 0 else "",
        "APT::Architecture": "amd64",
        "APT::Architectures::": "amd64",
    }
    argv = ["apt-get", "-q"]
    for key, value in opts.items():
        if value != "":
            argv += ["-o", f"{key}={value}"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def new_apt_sandbox(sandbox: Path, armored_key: bytes, sources: str, *, keyring_name: str) -> Path:
    """Make ``sandbox`` with ``sources`` as its sources.list and ``armored_key`` dearmored as ``keyring_name``
    (what ``curl gpgkey | gpg --dearmor -o /usr/share/keyrings/…`` does on a node); returns the keyring path."""
    for sub in (
        "state/lists/partial",
        "cache/archives/partial",
        "sources.list.d",
        "apt.conf.d",
        "preferences.d",
        "dl",
    ):
        (sandbox / sub).mkdir(parents=True)
    (sandbox / "state/status").touch()
    keyring = sandbox / keyring_name
    keyring.write_bytes(
        subprocess.run(["gpg", "--dearmor"], input=armored_key, capture_output=True, check=True).stdout
    )
    (sandbox / "sources.list").write_text(sources)
    return keyring


def dnf_with_repo(base: Path, repo_text: str, *args: str) -> subprocess.CompletedProcess[str]:
    """dnf confined to ``base``: its own installroot, repos dir (holding ``repo_text``), cache and log dir."""
    for sub in ("root", "repos", "cache", "log"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "dnf.conf").write_text("[main]\n")
    (base / "repos/nvidia-container-toolkit.repo").write_text(repo_text)
    argv = [
        "dnf",
        "-y",
        "-q",
        f"--installroot={base / 'root'}",
        f"--config={base / 'dnf.conf'}",
        f"--setopt=reposdir={base / 'repos'}",
        f"--setopt=cachedir={base / 'cache'}",
        f"--setopt=logdir={base / 'log'}",
        "--releasever=1",
        "--forcearch=x86_64",
        # the host's `local` plugin (dnf-plugins-core, enabled on Debian) would copy every installed
        # package into /var/lib/dnf/plugins/local, on the host, and offer it to later runs as _dnf_local
        "--disableplugin=local",
    ]
    try:
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120)
    finally:
        # repo_gpgcheck makes dnf start a gpg-agent per repo keyring; end exactly those.
        for pubring in (base / "cache").glob("*/pubring"):
            stop_agent(pubring)
