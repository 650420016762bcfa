"""End to end into a real minimal Debian: debootstrap it from 127.0.0.1, install a signed bundle, run nvidia-ctk in it.

Inputs: ``scripts/prepare-debootstrap-cache`` (a prerequisite of ``make pytest``) puts the .debs
that ``debootstrap --variant=minbase`` needs for this host's release in a local repo under
``$GPU_AIRGAP_TEST_CACHE/debootstrap/repo`` (default ``~/.cache/gpu-airgap-tests``), fetched
with the host's apt. The test itself talks only to 127.0.0.1: it serves that repo with
:class:`tests.upstream.UpstreamServer` and runs the real debootstrap against it, then caches the
finished root as a tarball keyed by the repo's Release file and debootstrap's version, so later
runs unpack it in about a second (``GPU_AIRGAP_DEBOOTSTRAP_FRESH=1`` forces a new debootstrap).

The bundle is the real thing: ``mirror sync`` from the local NVIDIA-like upstream, ``bundle build``
signed by a throwaway operator key, then ``gpu-airgap install --root ROOT --runtime none``. The
root's real libc6/libcap2/libseccomp2 meet the node requirements, and dpkg runs the maintainer
scripts chrooted into it, so ``chroot ROOT nvidia-ctk --version`` proves the install is usable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_runner import run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey, make_key
from tests.live.cache import locked
from tests.node_fixtures import TOOLKIT
from tests.upstream import UpstreamServer, UpstreamTree, stop_agent

CACHE = (
    Path(os.environ.get("GPU_AIRGAP_TEST_CACHE") or Path.home() / ".cache" / "gpu-airgap-tests")
    / "debootstrap"
)
REPO = CACHE / "repo"
PREPARE = "scripts/prepare-debootstrap-cache"
VERSION = "1.17.8"
NODE_LIBRARIES = ("libc6", "libcap2", "libseccomp2")


def _suite() -> str:
    """This host's release codename (the cache script fetched the debs for it)."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return ""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return fields.get("VERSION_CODENAME", "").strip('"')


SUITE = _suite()


def _missing_prerequisite() -> str:
    """Why this test cannot run here, or "" when it can."""
    if os.geteuid() != 0:
        return "the debootstrap end-to-end test needs root (debootstrap, chroot, dpkg --root)"
    for tool in ("debootstrap", "chroot", "tar", "zstd"):
        if shutil.which(tool) is None:
            return f"the debootstrap end-to-end test needs {tool} (make sysdeps installs it)"
    if not (REPO / "READY").is_file():
        return f"no debootstrap inputs in {REPO}: run {PREPARE} as root on a host with apt (make pytest does)"
    return ""


def _dpkg_query(root: Path, *names: str) -> dict[str, str]:
    """``{package: "VERSION STATUS"}`` as the root's own dpkg-query reports it, run inside the root."""
    out = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n", *names],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1].strip() for line in out.splitlines() if line.strip()}


def _root_key() -> str:
    """The cache key of a debootstrapped root: the repo's Release (it pins every deb by hash) and debootstrap."""
    debootstrap = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "debootstrap"], capture_output=True, text=True, check=False
    ).stdout
    release = (REPO / "dists" / SUITE / "Release").read_bytes()
    return hashlib.sha256(f"{SUITE} minbase {debootstrap}\n".encode() + release).hexdigest()[:16]


def _debootstrap_tarball(work: Path) -> Path:
    """Debootstrap from the repo served on 127.0.0.1 and save the root as ``roots/KEY.tar.zst`` (atomically)."""
    root = work / "root"
    with UpstreamServer(REPO) as server:
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", "--no-check-gpg", SUITE, str(root), server.url + "/"],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        fetched = {
            r.path.rsplit("/", 1)[-1] for r in server.log if r.status == 200 and r.path.endswith(".deb")
        }
    # Every package came from the local server (the repo holds exactly debootstrap's list).
    assert fetched == {p.name for p in (REPO / "pool").glob("*.deb")}
    roots = CACHE / "roots"
    roots.mkdir(parents=True, exist_ok=True)
    final = roots / f"{_root_key()}.tar.zst"
    partial = final.with_suffix(".partial")
    subprocess.run(
        [
            "tar",
            "--numeric-owner",
            "--xattrs",
            "-I",
            "zstd -T0 -3",
            "-C",
            str(root),
            "-cf",
            str(partial),
            ".",
        ],
        check=True,
        capture_output=True,
    )
    for old in roots.glob("*.tar.zst"):
        old.unlink()  # one root per cache: an older key's root is never used again
    partial.rename(final)
    shutil.rmtree(root)
    return final


def cached_debian_tarball(work: Path) -> Path:
    """A tarball of a pristine ``debootstrap --variant=minbase`` root, taken from the cache or made now in ``work``."""
    cached = CACHE / "roots" / f"{_root_key()}.tar.zst"
    # Under a lock: parallel pytest workers (and the demo) share one build instead of racing on it.
    with locked(CACHE / "roots.lock"):
        if cached.is_file() and not os.environ.get("GPU_AIRGAP_DEBOOTSTRAP_FRESH"):
            return cached
        return _debootstrap_tarball(work)


@pytest.fixture(scope="module")
def debian_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tarball of a pristine ``debootstrap --variant=minbase`` root, made now or taken from the cache."""
    reason = _missing_prerequisite()
    if reason:
        pytest.skip(reason)
    return cached_debian_tarball(tmp_path_factory.mktemp("debootstrap"))


@pytest.fixture
def debian_root(debian_tarball: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh copy of the minimal Debian for one test, removed afterwards (it is ~160 MB)."""
    root = tmp_path / "debian"
    root.mkdir()
    subprocess.run(
        ["tar", "--numeric-owner", "--xattrs", "-I", "zstd", "-C", str(root), "-xf", str(debian_tarball)],
        check=True,
        capture_output=True,
    )
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def signed_bundle(
    upstream_tree: UpstreamTree,
    _upstream_session_server: UpstreamServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, Path]]:
    """``(bundle, operator public key)``: a real mirror sync of 1.17.8 deb/amd64, built and signed with ``bundle build``."""
    if _missing_prerequisite():
        pytest.skip(_missing_prerequisite())
    work = tmp_path_factory.mktemp("debootstrap-bundle")
    synced = run_mirror_sync(
        work / "mirror", _upstream_session_server.url, upstream_tree.public_key, "--quiet", version=VERSION
    )
    assert synced.exit_code == 0, synced.stderr
    key: TestKey = make_key(work / "operator-gpg", "bundle operator <operator@example.invalid>")
    bundle = work / "bundle.tar.zst"
    built = run_bundle_build(work / "mirror", key, bundle, version=VERSION)
    assert built.exit_code == 0, built.stderr
    yield bundle, key.public
    stop_agent(key.home)


@pytest.mark.slow
def test_install_into_debootstrapped_debian_runs_nvidia_ctk_and_uninstall_removes_it(
    debian_root: Path, signed_bundle: tuple[Path, Path]
) -> None:
    bundle, public_key = signed_bundle
    libraries_before = _dpkg_query(debian_root, *NODE_LIBRARIES)
    # The node requirements are met by the real libraries debootstrap installed, not by seeded entries.
    assert set(libraries_before) == set(NODE_LIBRARIES)
    assert all(v.endswith("ii") for v in libraries_before.values()), libraries_before

    installed = run_cli(
        "install",
        str(bundle),
        "--keyring",
        str(public_key),
        "--root",
        str(debian_root),
        "--runtime",
        "none",
        "--json",
    )
    assert installed.exit_code == 0, installed.stderr
    assert json.loads(installed.stdout)["outcome"] == "installed"

    ctk = subprocess.run(
        ["chroot", str(debian_root), "/usr/bin/nvidia-ctk", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ctk.returncode == 0, ctk.stderr
    assert ctk.stdout.startswith(f"nvidia-ctk version {VERSION}")
    assert _dpkg_query(debian_root, *TOOLKIT) == {name: f"{VERSION}-1 ii" for name in TOOLKIT}

    removed = run_cli("uninstall", "--root", str(debian_root))
    assert removed.exit_code == 0, removed.stderr
    assert not (debian_root / "usr/bin/nvidia-ctk").exists()
    assert all(not status.endswith("ii") for status in _dpkg_query(debian_root, *TOOLKIT).values())
    assert _dpkg_query(debian_root, *NODE_LIBRARIES) == libraries_before
