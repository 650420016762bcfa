"""Build (and cache) a local tree byte-compatible with NVIDIA's gh-pages package repositories.

Layout produced under ``UpstreamTree.root`` (that of https://nvidia.github.io/libnvidia-container/)::

    gpgkey
    {stable,experimental}/deb/nvidia-container-toolkit.list
    {stable,experimental}/deb/{amd64,arm64}/{InRelease,Packages,Packages.xz,*.deb}
    {stable,experimental}/rpm/nvidia-container-toolkit.repo
    {stable,experimental}/rpm/{x86_64,aarch64}/{*.rpm,repodata/{repomd.xml,repomd.xml.asc,<sha512>-*.xml.gz}}

The ``.list``/``.repo`` files are byte-for-byte NVIDIA's text and therefore name
``https://nvidia.github.io/libnvidia-container``; :func:`localize` swaps that base for a local
server URL. Keeping the real URL means a mirror is tested against exactly what users download.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from tests.upstream import catalog
from tests.upstream.catalog import DEB_ARCHES, DEB_TO_RPM_ARCH, REAL_BASE_URL, PackageSpec
from tests.upstream.debs import build_deb, render_packages, write_index
from tests.upstream.keys import SigningKey, generate_key, stop_agent
from tests.upstream.prebuilt import (
    NVIDIA_BUILD,
    NVIDIA_BUILD_VERSION,
    Prebuilt,
    checked_build,
    prebuilt_installed_size,
)
from tests.upstream.rpms import build_rpm, write_repodata

CHANNELS: Final = ("stable", "experimental")
DEFAULT_CACHE: Final = Path(
    os.environ.get("GPU_AIRGAP_TEST_CACHE", Path.home() / ".cache" / "gpu-airgap-tests")
)
_META: Final = "tree.json"
#: The real-packages profile: stable 1.20.0-1 for amd64/x86_64 only, where nvidia-container-toolkit
#: and -base are NVIDIA's packages built from source (:mod:`tests.upstream.prebuilt`) and
#: libnvidia-container1/-tools stand-ins with the real 1.20.0-1 fields; no experimental channel.
REAL_PROFILE: Final = {
    "stable_versions": (NVIDIA_BUILD_VERSION,),
    "experimental_versions": (),
    "arches": ("amd64",),
    "prebuilt": str(NVIDIA_BUILD),
}

_LIST_STABLE: Final = (
    f"deb {REAL_BASE_URL}/stable/deb/$(ARCH) /\n#deb {REAL_BASE_URL}/experimental/deb/$(ARCH) /\n"
)
_LIST_EXPERIMENTAL: Final = f"deb {REAL_BASE_URL}/experimental/deb/$(ARCH) /\n"


def _repo_section(section: str, channel: str, enabled: bool) -> str:
    return (
        f"[{section}]\n"
        f"name={section}\n"
        f"baseurl={REAL_BASE_URL}/{channel}/rpm/$basearch\n"
        "repo_gpgcheck=1\n"
        "gpgcheck=0\n"
        f"enabled={int(enabled)}\n"
        f"gpgkey={REAL_BASE_URL}/gpgkey\n"
        "sslverify=1\n"
        "sslcacert=/etc/pki/tls/certs/ca-bundle.crt\n"
    )


_REPO_STABLE: Final = (
    _repo_section("nvidia-container-toolkit", "stable", True)
    + "\n"
    + _repo_section("nvidia-container-toolkit-experimental", "experimental", False)
)
_REPO_EXPERIMENTAL: Final = (
    _repo_section("nvidia-container-toolkit-experimental", "experimental", True)
    + "\n"
    + _repo_section("libnvidia-container-experimental", "experimental", True)
)


@dataclass(frozen=True)
class UpstreamTree:
    """A built local upstream. Treat ``root`` as read-only; copy it (:func:`copy_upstream`) to tamper."""

    root: Path  #: the site root, served as-is (``<root>/gpgkey``, ``<root>/stable/...``)
    key_fingerprint: str  #: fingerprint of the throwaway signing key
    public_key: Path  #: the armored public key (``<root>/gpgkey``)
    gnupghome: Path  #: private GNUPGHOME holding the secret key, for re-signing tampered files
    stable_versions: tuple[str, ...]  #: deb versions of the toolkit in stable/, oldest first
    experimental_versions: tuple[str, ...]  #: deb versions in experimental/
    payload_mb: float = 0.0
    build_seconds: float = 0.0  #: how long the cold build took

    @property
    def signing_key(self) -> SigningKey:
        """The key that signed this tree."""
        return SigningKey(self.gnupghome, self.key_fingerprint)

    def versions(self, channel: str) -> tuple[str, ...]:
        """Toolkit versions of ``channel`` (``stable`` or ``experimental``)."""
        return self.stable_versions if channel == "stable" else self.experimental_versions

    def deb_repo(self, channel: str, arch: str) -> Path:
        """The flat apt repo directory, e.g. ``<root>/stable/deb/amd64``."""
        return self.root / channel / "deb" / arch

    def rpm_repo(self, channel: str, arch: str) -> Path:
        """The yum repo directory, e.g. ``<root>/stable/rpm/x86_64``."""
        return self.root / channel / "rpm" / arch

    def to_json(self) -> str:
        """Serialise (paths as strings) for the cache."""
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, base: Path) -> UpstreamTree:
        """Load a cached tree whose files now live under ``base``."""
        data: dict[str, Any] = json.loads(text)
        return cls(
            root=base / "site",
            key_fingerprint=data["key_fingerprint"],
            public_key=base / "site" / "gpgkey",
            gnupghome=base / "gnupg",
            stable_versions=tuple(data["stable_versions"]),
            experimental_versions=tuple(data["experimental_versions"]),
            payload_mb=float(data["payload_mb"]),
            build_seconds=float(data["build_seconds"]),
        )


def localize(text: str, base_url: str) -> str:
    """Point a ``.list``/``.repo`` text at ``base_url`` instead of nvidia.github.io."""
    return text.replace(REAL_BASE_URL, base_url.rstrip("/"))


def _parallel(jobs: list[Callable[[], Any]], workers: int) -> list[Any]:
    # Threads are enough: the work is dpkg-deb/rpmbuild child processes, which do not hold the GIL.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [f.result() for f in [pool.submit(job) for job in jobs]]


def build_upstream(
    dest: Path,
    *,
    payload_mb: float = 0.0,
    extra_versions: int = 0,
    stable_versions: tuple[str, ...] = catalog.DEFAULT_STABLE,
    experimental_versions: tuple[str, ...] = catalog.DEFAULT_EXPERIMENTAL,
    arches: tuple[str, ...] = DEB_ARCHES,
    prebuilt: str | None = None,
    workers: int | None = None,
) -> UpstreamTree:
    """Build the whole local upstream into ``dest`` (which must not exist yet).

    :param dest: target directory; the site goes to ``dest/site``, the secret key to ``dest/gnupg``.
    :param payload_mb: pad every package with this many MiB of incompressible, seeded random bytes.
    :param extra_versions: add this many further real stable versions (newest first) for benchmarks.
    :param stable_versions: deb versions of the toolkit in stable (must exist in the real index).
    :param experimental_versions: deb versions in experimental (``~rc`` versions are modelled on their release);
        a channel without versions is left out.
    :param arches: deb architectures (each with its rpm counterpart).
    :param prebuilt: a directory of real packages (:class:`~tests.upstream.prebuilt.Prebuilt`) used
        instead of stand-ins where it has the file.
    :param workers: parallel dpkg-deb/rpmbuild jobs (default: 2 per CPU, at most 8).
    :returns: the built tree.
    """
    started = time.monotonic()
    dest = Path(os.path.abspath(dest))  # rpmbuild's %install runs elsewhere; relative paths would break
    dest.mkdir(parents=True)
    site, work = dest / "site", dest / "work"
    site.mkdir()
    work.mkdir()
    templates = catalog.load_templates()
    stable = catalog.choose_stable_versions(
        tuple(stable_versions), extra_versions, catalog.real_toolkit_versions(templates)
    )
    channels = {"stable": stable, "experimental": tuple(experimental_versions)}
    real = checked_build(Path(prebuilt)) if prebuilt else None
    key = generate_key(dest / "gnupg")
    try:
        (site / "gpgkey").write_bytes(key.public_key_armored())
        workers = workers or min(8, 2 * (os.cpu_count() or 1))
        plan = _ChannelPlan(templates, key, work, payload_mb, workers, tuple(arches), real)
        for channel, versions in channels.items():
            if versions:
                _build_channel(site / channel, channel, versions, plan)
    finally:
        stop_agent(key.gnupghome)
    shutil.rmtree(work)
    return UpstreamTree(
        root=site,
        key_fingerprint=key.fingerprint,
        public_key=site / "gpgkey",
        gnupghome=key.gnupghome,
        stable_versions=stable,
        experimental_versions=tuple(experimental_versions),
        payload_mb=payload_mb,
        build_seconds=round(time.monotonic() - started, 2),
    )


@dataclass(frozen=True)
class _ChannelPlan:
    """What every channel of one build shares."""

    templates: dict[tuple[str, str], tuple[tuple[str, str], ...]]
    key: SigningKey
    work: Path
    payload_mb: float
    workers: int
    arches: tuple[str, ...]
    prebuilt: Prebuilt | None


def _deb_job(spec: PackageSpec, out: Path, plan: _ChannelPlan) -> Callable[[], tuple[Path, int]]:
    real = plan.prebuilt.deb(spec) if plan.prebuilt else None
    if real is None:
        return functools.partial(build_deb, spec, out, plan.work, payload_mb=plan.payload_mb)

    def copy() -> tuple[Path, int]:
        size = prebuilt_installed_size(spec, real)
        return Path(shutil.copy2(real, out / real.name)), size

    return copy


def _rpm_job(spec: PackageSpec, out: Path, plan: _ChannelPlan) -> Callable[[], Path]:
    real = plan.prebuilt.rpm(spec) if plan.prebuilt else None
    if real is None:
        return functools.partial(build_rpm, spec, out, plan.work, payload_mb=plan.payload_mb)

    def copy() -> Path:
        return Path(shutil.copy2(real, out / real.name))

    return copy


def _build_channel(top: Path, channel: str, versions: tuple[str, ...], plan: _ChannelPlan) -> None:
    legacy = channel == "stable"
    templates, key, work = plan.templates, plan.key, plan.work
    per_arch = {
        a: catalog.package_specs(versions, arch=a, legacy=legacy, templates=templates) for a in plan.arches
    }
    # Build each distinct package once ("all" packages appear in every arch) and copy it around.
    unique: dict[tuple[str, str, str], PackageSpec] = {}
    for specs in per_arch.values():
        for spec in specs:
            unique.setdefault((spec.name, spec.version, spec.arch), spec)
    debs_out, rpms_out = work / channel / "debs", work / channel / "rpms"
    debs_out.mkdir(parents=True)
    rpms_out.mkdir(parents=True)
    order = list(unique.values())
    jobs: list[Callable[[], Any]] = []
    for spec in order:
        jobs.append(_deb_job(spec, debs_out, plan))
        jobs.append(_rpm_job(spec, rpms_out, plan))
    results = _parallel(jobs, plan.workers)
    debs = {(s.name, s.version, s.arch): results[2 * i] for i, s in enumerate(order)}

    for arch, specs in per_arch.items():
        repo = top / "deb" / arch
        repo.mkdir(parents=True)
        entries = []
        for spec in specs:
            built, installed = debs[(spec.name, spec.version, spec.arch)]
            shutil.copy2(built, repo / built.name)
            entries.append((spec, repo / built.name, installed))
        write_index(repo, arch=arch, channel=channel, packages=render_packages(entries), key=key)
        rpm_arch = DEB_TO_RPM_ARCH[arch]
        rpm_repo = top / "rpm" / rpm_arch
        rpm_repo.mkdir(parents=True)
        for spec in specs:
            shutil.copy2(rpms_out / spec.rpm_filename, rpm_repo / spec.rpm_filename)
        write_repodata(rpm_repo, key=key)
    (top / "deb" / "nvidia-container-toolkit.list").write_text(
        _LIST_STABLE if channel == "stable" else _LIST_EXPERIMENTAL, encoding="ascii"
    )
    (top / "rpm" / "nvidia-container-toolkit.repo").write_text(
        _REPO_STABLE if channel == "stable" else _REPO_EXPERIMENTAL, encoding="ascii"
    )


def cache_key(**params: Any) -> str:
    """A hash of the builder's source, the real index it copies and ``params``."""
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for path in [*sorted(here.glob("*.py")), catalog.REAL_PACKAGES]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    if params.get("prebuilt"):
        digest.update(b"prebuilt\0" + Prebuilt(Path(str(params["prebuilt"]))).fingerprint())
    digest.update(json.dumps(params, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_upstream(cache_dir: Path = DEFAULT_CACHE, **params: Any) -> UpstreamTree:
    """Return the tree for ``params`` from ``cache_dir``, building it once if it is not there.

    Safe across processes (a lock file per key); a build that dies leaves no half tree behind,
    because it happens in a scratch directory renamed into place at the end.
    """
    # ``workers`` changes how fast the tree is built, not what is in it.
    key = cache_key(**{k: v for k, v in params.items() if k != "workers"})
    cache_dir = Path(os.path.abspath(cache_dir))
    final = cache_dir / key
    with _locked(cache_dir / f"{key}.lock"):
        if not (final / _META).is_file():
            scratch = cache_dir / f"{key}.partial-{os.getpid()}"
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.rmtree(final, ignore_errors=True)
            tree = build_upstream(scratch, **params)
            (scratch / _META).write_text(tree.to_json(), encoding="utf-8")
            os.replace(scratch, final)
        return UpstreamTree.from_json((final / _META).read_text(encoding="utf-8"), final)


def real_upstream(cache_dir: Path = DEFAULT_CACHE) -> UpstreamTree:
    """The real-packages profile (:data:`REAL_PROFILE`), cached like :func:`cached_upstream`.

    :raises FileNotFoundError: when NVIDIA's packages built from source are not there or do not match SHA256SUMS.
    """
    return cached_upstream(cache_dir, **REAL_PROFILE)


def copy_upstream(tree: UpstreamTree, dest: Path) -> UpstreamTree:
    """Copy the site of ``tree`` to ``dest`` (for tests that tamper); the signing key is shared."""
    shutil.copytree(tree.root, dest, symlinks=True)
    return UpstreamTree(
        root=dest,
        key_fingerprint=tree.key_fingerprint,
        public_key=dest / "gpgkey",
        gnupghome=tree.gnupghome,
        stable_versions=tree.stable_versions,
        experimental_versions=tree.experimental_versions,
        payload_mb=tree.payload_mb,
        build_seconds=tree.build_seconds,
    )
