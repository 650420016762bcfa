"""``gpu-airgap mirror publish``: turn a mirror into a tree nodes' own apt and dnf can use.

The tree keeps upstream's paths (``stable/deb/amd64/``, ``stable/rpm/x86_64/``, …) and holds
exactly what the mirror's ``state.json`` lists, checked against the recorded digests as each file
is placed (:mod:`mirror.publish.place`). Two ways to make the indexes trusted:

- re-signed (default): fresh ``Packages``/``Packages.xz``/``InRelease`` and createrepo_c
  ``repodata/`` over the held packages (:mod:`mirror.signing.repos`), signed by the operator key;
  ``gpgkey`` is the operator's public key.
- ``--preserve-upstream``: upstream's own ``InRelease`` / ``repomd.xml(.asc)`` and indexes,
  unchanged, so nodes keep trusting NVIDIA's key; ``gpgkey`` is that key as the mirror verified
  it. Only possible when the mirror holds every package the signed index lists, so each repo is
  re-verified here and a filtered one is refused by name. Mixing preserved and re-signed repos is
  refused as well: a node trusts one ``gpgkey`` under one keyring name (the fleet contract), and
  two keys behind one name would make either half fail.

Order: check ``--output`` -> shared mirror lock -> build the whole tree beside ``--output`` -> swap it in
(:mod:`mirror.publish.swap`). Any error leaves ``--output`` as it was.
"""

from __future__ import annotations

import dataclasses
import json
import lzma
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from mirror.disk import store
from mirror.errors import FetchError, MirrorStateError
from mirror.index.repo import RepoSnapshot, check_digest, clean_relative, load_apt_repo, load_yum_repo
from mirror.model import SourcePackage
from mirror.publish.files import (
    DEFAULT_KEYRING_NAME,
    KEY_NAME,
    LIST_NAME,
    PREF_NAME,
    REPO_NAME,
    Site,
    render_install,
    render_list,
    render_nginx,
    render_pref,
    render_repo,
    valid_keyring_name,
)
from mirror.publish.place import Placer
from mirror.publish.swap import MARKER, check_target, staged
from mirror.signing.key import OperatorKey
from mirror.signing.repos import AptEntry, ReleaseLabels, apt_metadata, package_headers, yum_metadata
from plumbing.errors import NoSpaceError, SignatureError, ToolError, UsageError, VerificationError
from plumbing.fsutil import safe_join
from plumbing.gpg import Keyring
from plumbing.progress import Meter, NoMeter
from plumbing.version import VERSION

PUBLISH_LABELS: Final = ReleaseLabels(
    origin="gpu-airgap",
    label="gpu-airgap internal mirror",
    description="NVIDIA Container Toolkit packages re-signed by the mirror operator",
)


class PreserveError(UsageError):
    """``--preserve-upstream`` cannot keep upstream's signatures for a repo (the mirror is filtered)."""


@dataclass(frozen=True)
class PublishedRepo:
    """One repository of the published tree."""

    key: str  #: ``stable/deb/amd64``
    format: str
    arch: str
    channel: str
    packages: int
    bytes: int
    signed_by: str  #: fingerprint of the key that signed its index
    preserved: bool  #: upstream's own signed index


@dataclass(frozen=True)
class PublishResult:
    """What a publish produced."""

    out: str
    base_url: str
    signer: str  #: fingerprint of the key ``gpgkey`` holds
    preserved_upstream: bool
    repos: tuple[PublishedRepo, ...]
    files: int
    bytes: int
    linked: int  #: package/index files hard-linked from the mirror (the rest were copied)
    seconds: float


def normalize_base_url(url: str) -> str:
    """``http(s)://host[:port][/path]`` without a trailing slash.

    :raises UsageError: for another scheme, no host, or a query or fragment.
    """
    parts = urlsplit(url.strip())
    if (
        parts.scheme not in ("http", "https")
        or not parts.netloc
        or parts.query
        or parts.fragment
        or " " in url.strip()
    ):
        raise UsageError(
            f"--base-url {url!r} must be an http:// or https:// URL such as http://mirror.internal/nvct"
        )
    return url.strip().rstrip("/")


def publish(
    mirror: Path,
    out: Path,
    *,
    base_url: str,
    keyring_name: str = DEFAULT_KEYRING_NAME,
    key: OperatorKey | None,
    upstream_keyring: Keyring | None,
    epoch: int,
    info_cache: Path | None = None,
    meter: Meter | None = None,
    snapshot: str | None = None,
) -> PublishResult:
    """Publish mirror ``mirror`` into ``out`` for nodes that fetch from ``base_url``.

    :param snapshot: the snapshot name ``mirror`` is (:mod:`mirror.disk.snapshot`), recorded in the tree's marker.
    :param meter: told the bytes of the packages as they are placed (the CLI's terminal meter).
    :param base_url: where nodes reach ``out`` (see :func:`normalize_base_url`).
    :param keyring_name: nodes keep the key as ``/usr/share/keyrings/<keyring_name>.gpg``.
    :param key: the operator key that re-signs the indexes; None with ``upstream_keyring``.
    :param upstream_keyring: with ``--preserve-upstream``: the key(s) upstream's indexes must verify with.
    :param epoch: dates and signature times of generated files (SOURCE_DATE_EPOCH or now).
    :raises ToolError: (subclasses) for a bad target, a busy or damaged mirror, a filtered repo
        under ``--preserve-upstream``, or a mirror file that no longer matches its digest.
    """
    started = time.monotonic()
    if (key is None) == (upstream_keyring is None):
        raise UsageError("publish needs exactly one of an operator key and --preserve-upstream")
    if not valid_keyring_name(keyring_name):
        raise UsageError(
            f"--keyring-name {keyring_name!r} must be a plain file name such as {DEFAULT_KEYRING_NAME}"
        )
    base_url = normalize_base_url(base_url)
    check_target(out, mirror)
    with store.reading(mirror) as state:
        if not state.repos:
            raise MirrorStateError(mirror, "it holds no repository yet (run `gpu-airgap mirror sync` first)")
        site = Site(base_url, keyring_name, _channels(state, "deb"), _channels(state, "rpm"))
        meter = meter or NoMeter()
        meter.start(sum(p.size for repo in state.repos for p in repo.packages))
        try:
            with staged(out) as tree:
                result = _fill(
                    tree, state, mirror, out, site, key, upstream_keyring, epoch, info_cache, meter, snapshot
                )
        except (OSError, ToolError) as exc:
            if NoSpaceError.matches(exc):  # staged() removed the new tree: OUT is as it was
                raise NoSpaceError(out, f"{out} is unchanged") from exc
            raise
        finally:
            meter.close()
    return dataclasses.replace(result, seconds=time.monotonic() - started)


def _fill(
    tree: Path,
    state: store.MirrorState,
    mirror: Path,
    out: Path,
    site: Site,
    key: OperatorKey | None,
    upstream_keyring: Keyring | None,
    epoch: int,
    info_cache: Path | None,
    meter: Meter,
    snapshot: str | None = None,
) -> PublishResult:
    """Put every repo, the key, the text files and the marker into the empty ``tree``."""
    placer = Placer(mirror, tree, meter)
    if upstream_keyring is not None:
        repos = [_preserved(repo, mirror, placer, upstream_keyring) for repo in state.repos]
        signers = sorted({r.signed_by for r in repos})
        if len(signers) > 1:
            raise PreserveError(
                f"the mirror's repos are signed by different upstream keys ({', '.join(signers)}); publish them separately"
            )
        signer, public = signers[0], upstream_keyring.export(signers[0])
    else:
        assert key is not None
        repos = [_resigned(repo, mirror, placer, key, epoch, info_cache) for repo in state.repos]
        signer, public = key.fingerprint, key.public_key()
    texts = _site_files(site, out, signer=signer, preserved=upstream_keyring is not None)
    texts[KEY_NAME] = public
    for path, data in texts.items():
        placer.write(path, data, epoch)
    result = PublishResult(
        out=str(out),
        base_url=site.base_url,
        signer=signer,
        preserved_upstream=upstream_keyring is not None,
        repos=tuple(repos),
        files=placer.files,
        bytes=placer.bytes,
        linked=placer.linked,
        seconds=0.0,
    )
    marker = {
        "tool": "gpu-airgap",
        "version": VERSION,
        "mirror": os.path.abspath(mirror),
        "snapshot": snapshot,
        "created": datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **{k: v for k, v in dataclasses.asdict(result).items() if k not in ("out", "seconds")},
    }
    placer.write(MARKER, (json.dumps(marker, indent=2, sort_keys=True) + "\n").encode(), epoch)
    return result


def _channels(state: store.MirrorState, fmt: str) -> tuple[str, ...]:
    held = {r.channel for r in state.repos if r.format == fmt}
    return tuple(
        [c for c in ("stable", "experimental") if c in held] + sorted(held - {"stable", "experimental"})
    )


def _site_files(site: Site, out: Path, *, signer: str, preserved: bool) -> dict[str, bytes]:
    files = {f"{c}/deb/{LIST_NAME}": render_list(site, c) for c in site.deb_channels}
    files.update({f"{c}/deb/{PREF_NAME}": render_pref(site) for c in site.deb_channels})
    files.update({f"{c}/rpm/{REPO_NAME}": render_repo(site, c) for c in site.rpm_channels})
    files["INSTALL.md"] = render_install(site, signer=signer, preserved=preserved)
    files["nginx.conf.example"] = render_nginx(site, os.path.abspath(out))
    return {path: text.encode("utf-8") for path, text in files.items()}


def _source(stored: store.StoredPackage, placed: Path, sha256: str) -> SourcePackage:
    """The placed file, with the sha256 ``Placer.place`` computed while it checked the recorded digest."""
    return SourcePackage(
        stored.name, stored.version, stored.arch, placed, stored.size, sha256, stored.sha512, stored.url
    )


def _resigned(
    repo: store.RepoRecord,
    mirror: Path,
    placer: Placer,
    key: OperatorKey,
    epoch: int,
    info_cache: Path | None,
) -> PublishedRepo:
    """Place every package the repo holds at ``<key>/<file name>`` and sign fresh indexes over them."""
    names: dict[str, str] = {}
    sources: list[SourcePackage] = []
    sha256s: list[str] = []
    for stored in repo.packages:
        name = Path(stored.path).name
        if name in names:
            raise MirrorStateError(
                mirror, f"{repo.key} holds two packages named {name} ({names[name]}, {stored.path})"
            )
        names[name] = stored.path
        placed, sha256 = placer.place(stored, f"{repo.key}/{name}")
        sources.append(_source(stored, placed, sha256))
        sha256s.append(sha256)
    facts = package_headers(repo.format, sources, info_cache, verified=True)
    if repo.format == "deb":
        entries = [AptEntry(src, sha, fact.header.fields) for src, sha, fact in zip(sources, sha256s, facts)]
        metadata = apt_metadata(
            entries, arch=repo.arch, key=key, epoch=epoch, channel=repo.channel, labels=PUBLISH_LABELS
        )
    else:
        metadata = yum_metadata([s.path for s in sources], key=key, epoch=epoch)
    for path, data in metadata.items():
        placer.write(f"{repo.key}/{path}", data, epoch)
    return PublishedRepo(
        repo.key,
        repo.format,
        repo.arch,
        repo.channel,
        len(sources),
        sum(s.size for s in sources),
        key.fingerprint,
        preserved=False,
    )


class _MirrorFetcher:
    """Answers ``<mirror>/<key>/<path>`` "URLs" from the mirror's files, so :mod:`mirror.index.repo` re-verifies them."""

    def __init__(self, mirror: Path) -> None:
        self.mirror = mirror

    def get(self, url: str) -> bytes:
        try:
            return safe_join(self.mirror, os.path.relpath(url, self.mirror)).read_bytes()
        except FileNotFoundError:
            raise FetchError(url, 404) from None
        except OSError as exc:
            raise ToolError(f"cannot read {url}: {exc.strerror or exc}") from exc


def _preserved(repo: store.RepoRecord, mirror: Path, placer: Placer, keyring: Keyring) -> PublishedRepo:
    """Re-verify upstream's signed index of ``repo``, require every package it lists, and place all unchanged."""
    if repo.provenance.fingerprint not in keyring.fingerprints:
        raise SignatureError(
            f"the mirror verified {repo.key} with key {repo.provenance.fingerprint}, which the keyring does not hold; "
            "pass that key with --keyring"
        )
    base = f"{os.path.abspath(mirror)}/{repo.key}"
    loader = load_apt_repo if repo.format == "deb" else load_yum_repo
    snapshot = loader(_MirrorFetcher(mirror), base, keyring)
    held = {p.path: p for p in repo.packages}
    listed = {f"{repo.key}/{clean_relative(p.filename, base)}": p for p in snapshot.packages}
    have = [
        path
        for path, p in listed.items()
        if path in held and _same_file(held[path], p.size, p.sha256, p.sha512)
    ]
    if len(have) != len(listed):
        raise PreserveError(
            f"--preserve-upstream cannot keep upstream's signatures for {repo.key}: the mirror is filtered "
            f"(it holds {len(have)} of the {len(listed)} packages the signed index lists); "
            "sync it with --version all, or publish without --preserve-upstream to re-sign it with --sign-key"
        )
    signed = {f.path: f for f in repo.provenance.signed_files}
    needed = [f"{repo.key}/{clean_relative(m.path, base)}" for m in snapshot.metadata] + _other_indexes(
        snapshot, repo.key, base
    )
    for path in needed:
        if path not in signed:
            raise PreserveError(
                f"--preserve-upstream cannot publish {repo.key}: the mirror does not hold {path}, which its signed index names"
            )
        placer.place(signed[path], path)
    _derived_packages(snapshot, repo.key, placer)
    for path in sorted(listed):
        placer.place(held[path], path)
    return PublishedRepo(
        repo.key,
        repo.format,
        repo.arch,
        repo.channel,
        len(listed),
        sum(p.size for p in listed.values()),
        snapshot.fingerprint,
        preserved=True,
    )


def _same_file(stored: store.StoredPackage, size: int, sha256: str | None, sha512: str | None) -> bool:
    pairs = [(stored.sha256, sha256), (stored.sha512, sha512)]
    return stored.size == size and any(a and b for a, b in pairs) and all(a == b for a, b in pairs if a and b)


def _other_indexes(snapshot: RepoSnapshot, key: str, base: str) -> list[str]:
    """yum: filelists/other/… that repomd.xml names besides primary (apt has none)."""
    if snapshot.repomd is None:
        return []
    have = {m.path for m in snapshot.metadata}
    return sorted(
        f"{key}/{clean_relative(d.href, base)}" for d in snapshot.repomd.data.values() if d.href not in have
    )


def _derived_packages(snapshot: RepoSnapshot, key: str, placer: Placer) -> None:
    """apt: when the mirror kept only ``Packages.xz``, also publish the ``Packages`` InRelease lists (checked)."""
    release = snapshot.release
    if (
        release is None
        or "Packages" not in release.files
        or any(m.path == "Packages" for m in snapshot.metadata)
    ):
        return
    xz = next((m.data for m in snapshot.metadata if m.path == "Packages.xz"), None)
    if xz is None:
        return
    plain = lzma.decompress(xz)
    try:
        check_digest(
            f"{key}/Packages",
            plain,
            "sha512",
            release.files["Packages"].sha512,
            release.files["Packages"].size,
        )
    except VerificationError:
        return  # InRelease lists Packages.xz too, which apt prefers; an unusable Packages is simply left out
    placer.write(f"{key}/Packages", plain, None)
