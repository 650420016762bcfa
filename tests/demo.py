"""``make demo`` (``python -m tests.demo``): the pipeline end to end against the local upstream.

Build the NVIDIA-like upstream into ``./demo-work/upstream`` (the real-packages profile: NVIDIA's
own ``nvidia-container-toolkit`` and ``-base`` 1.20.0 built from source, see ``tests/upstream``) and
serve it on a free 127.0.0.1 port, then run what the two roles would run, with the real
``gpu-airgap`` command line:

1. operator: ``mirror sync`` (and a no-op re-sync), ``bundle build`` signed with a throwaway
   operator key, ``bundle inspect`` and ``bundle verify``;
2. node admin: take ``install.sh`` and the zipapp out of the bundle and check them against the
   operator key with the node's own ``tar``, ``gpg``, ``gpgv`` and ``sha256sum`` (the command
   ``bundle build`` prints), then install into a minimal Debian root (the debootstrap root of
   ``tests/test_node_debootstrap.py``, so NVIDIA's postinst really runs in it) with a containerd
   config and stand-in GPU device nodes, then
   ``configure runtimeclass``, ``configure report``, ``configure verify`` and ``status``;
3. ``uninstall``, which puts the containerd config back byte for byte.

Needs root (dpkg installs into another root only as root, and runs the scripts chrooted) and the
local Debian repo of ``scripts/prepare-debootstrap-cache`` (``make demo`` runs it); the Debian root
is cached after the first run.

Each stage is a function taking the :class:`DemoContext`; :data:`STAGES` lists them in order.
The demo exits by itself and leaves everything under ``./demo-work/``.
"""

from __future__ import annotations

import filecmp
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.upstream import UpstreamServer, UpstreamTree, real_upstream

WORK = Path("demo-work")


@dataclass
class DemoContext:
    """What one stage hands to the next."""

    work: Path  #: ./demo-work
    tree: UpstreamTree  #: the built upstream
    server: UpstreamServer  #: serving ``tree.root``
    notes: list[str] = field(default_factory=list)  #: lines for the final report
    values: dict[str, str] = field(default_factory=dict)  #: what a stage learned (key fingerprint, ...)


def say(line: str = "") -> None:
    """Print one line of demo output."""
    print(line, flush=True)


def stage_build_upstream(work: Path) -> UpstreamTree:
    """Build (or reuse) the local upstream (real-packages profile) and expose it at ./demo-work/upstream."""
    tree = real_upstream(work / ".cache")
    link = work / "upstream"
    if link.is_symlink() or link.exists():
        link.unlink() if link.is_symlink() else shutil.rmtree(link)
    link.symlink_to(tree.root.resolve(), target_is_directory=True)
    say(
        f"== upstream built in {tree.build_seconds:.1f} s (cached after the first run): {link} -> {tree.root}"
    )
    return tree


def _fetch(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:  # 127.0.0.1 only
        return int(resp.status), resp.read()


def stage_show_upstream(ctx: DemoContext) -> None:
    """List channels, repos, package counts and the key, then fetch a few URLs like a client would."""
    tree, server = ctx.tree, ctx.server
    say(f"== serving {tree.root} at {server.url}/")
    say(f"   signing key fingerprint: {tree.key_fingerprint}")
    for channel in [c for c in ("stable", "experimental") if tree.versions(c)]:
        say(f"   {channel}: toolkit versions {', '.join(tree.versions(channel))}")
        for repo in sorted((tree.root / channel / "deb").iterdir()):
            if repo.is_dir():
                count = (repo / "Packages").read_text().count("\nPackage: ") + 1
                say(
                    f"     deb {channel}/deb/{repo.name}: {count} packages (InRelease, Packages, Packages.xz)"
                )
        for repo in sorted((tree.root / channel / "rpm").iterdir()):
            if repo.is_dir():
                say(
                    f"     rpm {channel}/rpm/{repo.name}: {_rpm_count(repo)} packages (repodata, repomd.xml.asc)"
                )
    say("== fetching like apt and dnf do")
    for path in (
        "stable/deb/nvidia-container-toolkit.list",
        "gpgkey",
        "stable/deb/amd64/InRelease",
        "stable/rpm/x86_64/repodata/repomd.xml.asc",
        f"stable/deb/amd64/nvidia-container-toolkit_{RELEASE}-1_amd64.deb",
    ):
        status, body = _fetch(server.url_for(path))
        say(f"   GET {server.url_for(path)} -> {status}, {len(body)} bytes")
    ctx.notes.append(f"upstream served {len(server.log)} requests")


def _rpm_count(repo: Path) -> int:
    ns = {"r": "http://linux.duke.edu/metadata/repo"}
    repomd = ET.parse(repo / "repodata" / "repomd.xml").getroot()
    href = ""
    for data in repomd.findall("r:data", ns):
        location = data.find("r:location", ns)
        if data.get("type") == "primary" and location is not None:
            href = location.get("href", "")
    primary = gzip.decompress((repo / href).read_bytes()).decode()
    match = re.search(r'packages="(\d+)"', primary)
    return int(match.group(1)) if match else 0


GPU_AIRGAP = str(Path(sys.executable).with_name("gpu-airgap"))
RELEASE = "1.20.0"
CONTAINERD_BASE = Path(__file__).parent / "data" / "fixtures" / "containerd" / "config.toml.base"
#: root's usual PATH: dpkg needs ldconfig and start-stop-daemon from the sbin directories
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Show ``$ argv`` like a terminal session, run it, show its output, fail the demo on error."""
    shown = " ".join(
        shlex.quote(a.replace(GPU_AIRGAP, "gpu-airgap").replace(str(Path.cwd()) + "/", "")) for a in argv
    )
    say(f"$ {shown}")
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    for line in (result.stdout + result.stderr).splitlines():
        say(f"    {line}")
    if result.returncode != 0:
        raise SystemExit(f"demo: the command above failed with exit code {result.returncode}")
    return result.stdout


def fresh(path: Path) -> Path:
    """An empty directory at ``path`` (the demo starts from scratch each run, except the upstream cache)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def stage_sync(ctx: DemoContext) -> None:
    """Operator: sync the release for deb/amd64 and rpm/x86_64 from the local upstream, then re-sync."""
    say("== operator: mirror the pinned release (upstream key named explicitly: it is not NVIDIA's)")
    mirror = ctx.work / "mirror"
    if mirror.exists():
        shutil.rmtree(mirror)
    sync = [
        GPU_AIRGAP,
        "mirror",
        "sync",
        "--dest",
        str(mirror),
        "--upstream",
        ctx.server.url,
        "--keyring",
        str(ctx.tree.public_key),
        "--version",
        RELEASE,
        "--format",
        "deb,rpm",
        "--arch",
        "amd64",
    ]
    run(sync)
    before = len(ctx.server.log)
    run([*sync, "--quiet"])
    package_requests = [r for r in ctx.server.log[before:] if r.path.endswith((".deb", ".rpm"))]
    ctx.notes.append(f"re-sync with nothing new upstream: {len(package_requests)} package requests")
    run([GPU_AIRGAP, "mirror", "verify", "--mirror", str(mirror)])


def stage_bundle(ctx: DemoContext) -> None:
    """Operator: make a throwaway signing key, build the signed bundle, inspect and verify it."""
    say("== operator: build one signed bundle for both targets")
    operator = fresh(ctx.work / "operator")
    home = operator / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet"]
    subprocess.run(
        [
            *gpg,
            "--passphrase",
            "",
            "--quick-gen-key",
            "Demo operator <ops@example.invalid>",
            "ed25519",
            "sign",
            "never",
        ],
        check=True,
        capture_output=True,
    )
    listing = subprocess.run(
        [*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True
    )
    fingerprint = next(line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:"))
    public = operator / "operator.asc"
    public.write_bytes(
        subprocess.run([*gpg, "--armor", "--export", fingerprint], check=True, capture_output=True).stdout
    )
    subprocess.run(
        ["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False, capture_output=True
    )
    say(f"   operator key {fingerprint} (public half: {public})")
    bundle = ctx.work / f"gpu-airgap-{RELEASE}.tar.zst"
    run(
        [
            GPU_AIRGAP,
            "bundle",
            "build",
            "--mirror",
            str(ctx.work / "mirror"),
            "--version",
            RELEASE,
            "--target",
            "deb/amd64",
            "--target",
            "rpm/x86_64",
            "--sign-key",
            fingerprint,
            "--gnupghome",
            str(home),
            "--output",
            str(bundle),
        ]
    )
    # signing started the operator's gpg-agent again; the demo leaves no process behind
    subprocess.run(
        ["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False, capture_output=True
    )
    run([GPU_AIRGAP, "bundle", "inspect", str(bundle)])
    run([GPU_AIRGAP, "bundle", "verify", str(bundle), "--keyring", str(public)])
    ctx.values.update(bundle=str(bundle.resolve()), keyring=str(public.resolve()))
    ctx.notes.append(f"bundle {bundle} ({bundle.stat().st_size} bytes) signed by {fingerprint}")


def debian_root(work: Path) -> Path:
    """A fresh minimal Debian (debootstrap --variant=minbase from the local repo, cached as a tarball)."""
    from tests.test_node_debootstrap import _missing_prerequisite, cached_debian_tarball

    reason = _missing_prerequisite()
    if reason:
        raise SystemExit(f"demo: {reason}")
    root = fresh(work / "node-root")
    tarball = cached_debian_tarball(fresh(work / "debootstrap"))
    subprocess.run(
        ["tar", "--numeric-owner", "--xattrs", "-I", "zstd", "-C", str(root), "-xf", str(tarball)], check=True
    )
    say(f"   node root: minimal Debian from {tarball}")
    return root


def stage_install(ctx: DemoContext) -> None:
    """Node admin: a minimal Debian node with containerd's config, then install.sh from the bundle."""
    say(
        "== node admin: check the node files with the node's own tools, then install (into a minimal Debian root)"
    )
    root = debian_root(ctx.work)
    config = root / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    shutil.copyfile(CONTAINERD_BASE, config)
    for node in ("nvidia0", "nvidiactl"):  # stand-in device nodes, so a CDI spec can be written
        (root / "dev" / node).touch()
    unpacked = fresh(ctx.work / "node-media")
    node_env = {
        "PATH": NODE_PATH,
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        # keep the zipapp's extract-once cache with the demo, not in /var/cache/gpu-airgap
        "GPU_AIRGAP_NODE_CACHE": str((ctx.work / "node-cache").resolve()),
    }
    from installer.nodecheck import node_command

    options = ["--root", str(root.resolve()), "--runtime", "containerd"]
    checked = node_command(ctx.values["bundle"], ctx.values["keyring"]) + " " + shlex.join(options)
    run(["sh", "-c", checked], cwd=unpacked, env=node_env)
    # the second run changes nothing (a fresh private copy, checked again before it runs)
    run(["sh", "-c", checked], cwd=unpacked, env=node_env)
    run(
        [
            "chroot",
            str(root),
            "dpkg-query",
            "-W",
            "libnvidia-container1",
            "libnvidia-container-tools",
            "nvidia-container-toolkit-base",
            "nvidia-container-toolkit",
        ]
    )
    run(["chroot", str(root), "nvidia-ctk", "--version"])  # NVIDIA's binary, inside the node
    ctx.values["root"] = str(root)


def stage_configure(ctx: DemoContext) -> None:
    """Node admin: RuntimeClass, then read back what the node will use."""
    say("== node admin: RuntimeClass, report, verify, status")
    root = ctx.values["root"]
    run(
        [
            GPU_AIRGAP,
            "configure",
            "runtimeclass",
            "--root",
            root,
            "--output",
            "/etc/kubernetes/runtimeclass-nvidia.yaml",
        ]
    )
    run([GPU_AIRGAP, "configure", "report", "--root", root])
    run([GPU_AIRGAP, "configure", "verify", "--root", root])
    run([GPU_AIRGAP, "status", "--root", root])


def stage_uninstall(ctx: DemoContext) -> None:
    """Node admin: undo everything; the containerd config is the original, byte for byte."""
    say("== node admin: uninstall")
    root = Path(ctx.values["root"])
    run([GPU_AIRGAP, "uninstall", "--root", str(root)], env={**os.environ, "PATH": NODE_PATH})
    same = filecmp.cmp(root / "etc/containerd/config.toml", CONTAINERD_BASE, shallow=False)
    ctx.notes.append(f"containerd config after uninstall identical to the original: {same}")
    if not same:
        raise SystemExit("demo: uninstall did not restore the containerd config")


#: Stages after the upstream is up, in order.
STAGES: list[Callable[[DemoContext], None]] = [
    stage_show_upstream,
    stage_sync,
    stage_bundle,
    stage_install,
    stage_configure,
    stage_uninstall,
]


def main() -> int:
    """Run every stage and exit."""
    WORK.mkdir(exist_ok=True)
    tree = stage_build_upstream(WORK)
    with UpstreamServer(tree.root) as server:
        ctx = DemoContext(WORK, tree, server)
        for stage in STAGES:
            stage(ctx)
    say("== report")
    for note in ctx.notes:
        say(f"   {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
