"""The tools compared by bench_peers: how each one is configured and run against a local upstream.

Each tool gets a private ``state`` directory (its config, database and mirror) and is run as a
child process with argv lists, like a user would. ``cold`` is the first sync into an empty state,
``resync`` a later run on the same state. Commands come from each tool's own documentation.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

#: The four packages of one toolkit release (the pinned closure inside NVIDIA's repo).
FOUR: tuple[str, ...] = (
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
)
GPU_AIRGAP = str(Path(sys.executable).with_name("gpu-airgap"))


@dataclass(frozen=True)
class Context:
    """Where and what one tool run syncs."""

    state: Path  #: the tool's private directory
    url: str  #: base URL of the upstream site (``<url>/stable/deb/amd64/InRelease``)
    fmt: str  #: ``deb`` or ``rpm``
    key: Path  #: the armored public key the tool is told to trust
    jobs: int  #: parallel downloads
    files: tuple[str, ...]  #: the raw downloader's list: site-relative paths of one release

    @property
    def repo(self) -> str:
        """The site-relative repo directory, e.g. ``stable/deb/amd64``."""
        return "stable/deb/amd64" if self.fmt == "deb" else "stable/rpm/x86_64"

    @property
    def host_port(self) -> str:
        """``127.0.0.1:PORT`` of the upstream."""
        return self.url.split("://", 1)[1].split("/", 1)[0]


class Tool(Protocol):
    """One tool under comparison."""

    name: str
    formats: tuple[str, ...]
    peer: bool  #: a peer tool (False: our tool or the raw downloader)
    takes_key: bool  #: has a way to be told which key signs upstream

    def setup(self, ctx: Context) -> None:
        """Write the tool's configuration into ``ctx.state`` (not timed)."""

    def cold(self, ctx: Context) -> list[list[str]]:
        """The commands of a first sync into an empty state."""

    def resync(self, ctx: Context) -> list[list[str]]:
        """The commands of a later sync on the same state."""


class GpuAirgap:
    """``gpu-airgap mirror sync``."""

    name = "gpu-airgap"
    formats: tuple[str, ...] = ("deb", "rpm")
    peer = False
    takes_key = True

    def setup(self, ctx: Context) -> None:
        pass

    def cold(self, ctx: Context) -> list[list[str]]:
        arch = "amd64" if ctx.fmt == "deb" else "x86_64"
        return [
            [
                GPU_AIRGAP,
                "mirror",
                "sync",
                "--dest",
                str(ctx.state / "mirror"),
                "--upstream",
                ctx.url,
                "--keyring",
                str(ctx.key),
                "--format",
                ctx.fmt,
                "--arch",
                arch,
                "--jobs",
                str(ctx.jobs),
                "--quiet",
            ]
        ]

    resync = cold


class Aptly:
    """aptly 1.5: ``mirror create`` with a filter for the four packages, then ``mirror update``."""

    name = "aptly"
    formats: tuple[str, ...] = ("deb",)
    peer = True
    takes_key = True

    def setup(self, ctx: Context) -> None:
        (ctx.state / "gnupg").mkdir(mode=0o700)
        subprocess.run(
            ["gpg", "--batch", "--yes", "--dearmor", "-o", str(ctx.state / "trusted.gpg"), str(ctx.key)],
            check=True,
            env={"GNUPGHOME": str(ctx.state / "gnupg"), "PATH": "/usr/bin:/bin"},
        )
        (ctx.state / "aptly.conf").write_text(
            f'{{"rootDir": "{ctx.state}/aptly", "downloadConcurrency": {ctx.jobs}, "architectures": ["amd64"], "gpgProvider": "gpg"}}\n'
        )

    def _base(self, ctx: Context) -> list[str]:
        return ["aptly", f"-config={ctx.state}/aptly.conf"]

    def cold(self, ctx: Context) -> list[list[str]]:
        create = [
            *self._base(ctx),
            "mirror",
            "create",
            f"-keyring={ctx.state}/trusted.gpg",
            "-architectures=amd64",
            f"-filter={' | '.join(FOUR)}",
            "nct",
            f"{ctx.url}/{ctx.repo}/",
            "./",
        ]
        return [create, *self.resync(ctx)]

    def resync(self, ctx: Context) -> list[list[str]]:
        return [[*self._base(ctx), "mirror", "update", f"-keyring={ctx.state}/trusted.gpg", "nct"]]


class AptMirror:
    """apt-mirror 0.5.4 with a flat ``deb URL /`` line (mirrors every package; checks no signature)."""

    name = "apt-mirror"
    formats: tuple[str, ...] = ("deb",)
    peer = True
    takes_key = False

    def setup(self, ctx: Context) -> None:
        base = ctx.state / "am"
        # apt-mirror strips ":PORT" from the paths it reads (sanitise_uri) while wget writes
        # "host:port/": the symlinks make both names one directory, as on a port-80 upstream.
        for sub in ("skel", "mirror"):
            (base / sub / ctx.host_port).mkdir(parents=True)
            (base / sub / ctx.host_port.split(":")[0]).symlink_to(ctx.host_port)
        (ctx.state / "mirror.list").write_text(
            f"set base_path {base}\nset nthreads {ctx.jobs}\nset defaultarch amd64\nset run_postmirror 0\n"
            f"set _tilde 0\ndeb {ctx.url}/{ctx.repo} /\n"
        )

    def cold(self, ctx: Context) -> list[list[str]]:
        return [["apt-mirror", str(ctx.state / "mirror.list")]]

    resync = cold


class Reposync:
    """dnf reposync (dnf-plugins-core 4.3) with ``repo_gpgcheck=1`` and ``includepkgs`` = the four packages."""

    name = "dnf reposync"
    formats: tuple[str, ...] = ("rpm",)
    peer = True
    takes_key = True

    def setup(self, ctx: Context) -> None:
        (ctx.state / "repos").mkdir()
        (ctx.state / "repos" / "nct.repo").write_text(
            f"[nct]\nname=nct\nbaseurl={ctx.url}/{ctx.repo}\nrepo_gpgcheck=1\ngpgcheck=0\nenabled=1\n"
            f"gpgkey=file://{ctx.key}\nincludepkgs={','.join(FOUR)}\n"
        )

    def cold(self, ctx: Context) -> list[list[str]]:
        s = ctx.state
        return [
            [
                "dnf",
                "-y",
                f"--setopt=reposdir={s}/repos",
                f"--setopt=cachedir={s}/cache",
                f"--setopt=persistdir={s}/cache/persist",
                f"--setopt=logdir={s}/cache/log",
                "--releasever=9",
                f"--setopt=max_parallel_downloads={ctx.jobs}",
                "--refresh",
                "reposync",
                "--repoid=nct",
                "-p",
                f"{s}/rs",
                "--download-metadata",
                "-a",
                "x86_64",
            ]
        ]

    resync = cold


class Aria2:
    """aria2c fetching exactly the files of one release from a list: the physical baseline."""

    peer = False
    takes_key = False
    formats: tuple[str, ...] = ("deb", "rpm")

    def __init__(self, *, sha512: bool = False) -> None:
        """With ``sha512``, hash every downloaded file with sha512sum afterwards (the unthrottled baseline)."""
        self.sha512 = sha512
        self.name = "aria2c + sha512sum" if sha512 else "aria2c"

    def setup(self, ctx: Context) -> None:
        self.write_urls(ctx.files, ctx)

    def write_urls(self, files: tuple[str, ...], ctx: Context) -> None:
        """Tell the downloader to fetch ``files`` (site-relative) from then on."""
        (ctx.state / "urls.txt").write_text("".join(f"{ctx.url}/{f}\n  out={f}\n" for f in files))

    def cold(self, ctx: Context) -> list[list[str]]:
        out = ctx.state / "out"
        fetch = [
            "aria2c",
            "-q",
            "-j",
            str(ctx.jobs),
            "-x",
            "1",
            "--allow-overwrite=true",
            "--auto-file-renaming=false",
            "--conditional-get=true",
            "--remote-time=true",
            "--retry-wait=1",
            "--max-tries=5",
            "-d",
            str(out),
            "-i",
            str(ctx.state / "urls.txt"),
        ]
        if not self.sha512:
            return [fetch]
        return [fetch, ["sha512sum", *(str(out / f) for f in ctx.files)]]

    resync = cold


def tools_for(fmt: str, only: tuple[str, ...] = ()) -> list[Tool]:
    """Our tool, the peers that handle ``fmt`` and the raw downloader (those named in ``only``, if given)."""
    every: list[Tool] = [GpuAirgap(), Aptly(), AptMirror(), Reposync(), Aria2()]
    return [t for t in every if fmt in t.formats and (not only or t.name in only)]
