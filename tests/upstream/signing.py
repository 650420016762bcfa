"""Helpers for tamper tests: re-sign changed files with the tree's key, or sign with a wrong key."""

from __future__ import annotations

from pathlib import Path

from tests.upstream.build import UpstreamTree
from tests.upstream.debs import release_body
from tests.upstream.keys import SigningKey, generate_key


def make_wrong_key(gnupghome: Path) -> SigningKey:
    """A second throwaway key (in its own new GNUPGHOME) for "signed by another key" tests."""
    return generate_key(gnupghome, name="gpu-airgap WRONG key (throwaway)")


def sign_clear(tree: UpstreamTree, body: bytes, *, key: SigningKey | None = None) -> bytes:
    """Clearsign ``body`` with the tree's key (or ``key``), the way InRelease is signed."""
    return (key or tree.signing_key).clearsign(body)


def sign_detached(tree: UpstreamTree, data: bytes, *, key: SigningKey | None = None) -> bytes:
    """An armored detached signature of ``data`` by the tree's key (or ``key``), like repomd.xml.asc."""
    return (key or tree.signing_key).sign_detached(data)


def resign_inrelease(tree: UpstreamTree, path: Path, *, key: SigningKey | None = None) -> Path:
    """Rewrite the InRelease of a flat repo so it matches the repo's current Packages/Packages.xz.

    :param path: the repo directory (``.../stable/deb/amd64``) or its ``InRelease`` file.
    :param key: sign with this key instead of the tree's (a wrong-key test).
    :returns: the InRelease path.
    """
    repo = path.parent if path.name == "InRelease" else path
    channel = repo.parent.parent.name
    files = {name: (repo / name).read_bytes() for name in ("Packages", "Packages.xz")}
    body = release_body(arch=repo.name, channel=channel, files=files)
    inrelease = repo / "InRelease"
    inrelease.write_bytes(sign_clear(tree, body, key=key))
    return inrelease


def resign_repomd(tree: UpstreamTree, repo: Path, *, key: SigningKey | None = None) -> Path:
    """Rewrite ``repodata/repomd.xml.asc`` for the current ``repomd.xml`` of the yum repo ``repo``."""
    repomd = repo / "repodata" / "repomd.xml"
    asc = repomd.with_name("repomd.xml.asc")
    asc.write_bytes(sign_detached(tree, repomd.read_bytes(), key=key))
    return asc
