"""An index re-signed over the wrong package: the file at one entry's name is another version's.

:func:`swap_package` puts the bytes of ``impostor`` (say ``x_1.18.0-1_amd64.deb``) at ``victim``'s
name (``x_1.17.8-1_amd64.deb``) and rewrites that entry's size and digests in the index - apt
``Packages``/``Packages.xz``, or yum ``primary.xml.gz`` and ``repomd.xml`` - then re-signs the
index with the tree's key. The entry still says name, version and dependencies of the victim, and
its digest now matches the file: only the package's own header tells the truth.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import re
import shutil
from pathlib import Path

from tests.upstream.build import UpstreamTree
from tests.upstream.signing import resign_inrelease, resign_repomd


def swap_package(tree: UpstreamTree, repo: Path, victim: str, impostor: str) -> None:
    """Replace ``repo/victim`` by a copy of ``repo/impostor`` under a re-signed index that vouches for it."""
    shutil.copyfile(repo / impostor, repo / victim)
    data = (repo / victim).read_bytes()
    if victim.endswith(".deb"):
        _reindex_deb(repo, victim, data)
        resign_inrelease(tree, repo)
    else:
        _reindex_rpm(repo, victim, data)
        resign_repomd(tree, repo)


def _reindex_deb(repo: Path, victim: str, data: bytes) -> None:
    stanzas = (repo / "Packages").read_text(encoding="utf-8").split("\n\n")
    digests = {
        "Size": str(len(data)),
        "MD5sum": hashlib.md5(data).hexdigest(),
        "SHA1": hashlib.sha1(data).hexdigest(),
        "SHA256": hashlib.sha256(data).hexdigest(),
        "SHA512": hashlib.sha512(data).hexdigest(),
    }
    for index, stanza in enumerate(stanzas):
        if f"Filename: ./{victim}\n" in stanza + "\n":
            for field, value in digests.items():
                stanza = re.sub(rf"^{field}: .*$", f"{field}: {value}", stanza, flags=re.MULTILINE)
            stanzas[index] = stanza
            break
    else:
        raise ValueError(f"{victim} is not in {repo}/Packages")
    packages = "\n\n".join(stanzas).encode("utf-8")
    (repo / "Packages").write_bytes(packages)
    (repo / "Packages.xz").write_bytes(lzma.compress(packages, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64))


def _reindex_rpm(repo: Path, victim: str, data: bytes) -> None:
    repomd_path = repo / "repodata" / "repomd.xml"
    repomd = repomd_path.read_text(encoding="utf-8")
    href = re.search(r'<data type="primary">.*?<location href="([^"]+)"', repomd, flags=re.DOTALL)
    if href is None:
        raise ValueError(f"{repomd_path} names no primary")
    primary_path = repo / href.group(1)
    xml = gzip.decompress(primary_path.read_bytes()).decode("utf-8")
    blocks = xml.split("<package ")
    for index, block in enumerate(blocks):
        if f'<location href="{victim}"/>' in block:
            block = re.sub(
                r'(<checksum type="sha512" pkgid="YES">)[0-9a-f]+(</checksum>)',
                rf"\g<1>{hashlib.sha512(data).hexdigest()}\g<2>",
                block,
            )
            blocks[index] = re.sub(r'<size package="\d+"', f'<size package="{len(data)}"', block)
            break
    else:
        raise ValueError(f"{victim} is not in {primary_path.name}")
    opened = "<package ".join(blocks).encode("utf-8")
    packed = gzip.compress(opened, mtime=0)
    primary_path.write_bytes(packed)
    section = re.search(r'<data type="primary">.*?</data>', repomd, flags=re.DOTALL)
    assert section is not None
    new = re.sub(
        r'(<checksum type="sha512">)[0-9a-f]+',
        rf"\g<1>{hashlib.sha512(packed).hexdigest()}",
        section.group(0),
    )
    new = re.sub(
        r'(<open-checksum type="sha512">)[0-9a-f]+', rf"\g<1>{hashlib.sha512(opened).hexdigest()}", new
    )
    new = re.sub(r"<size>\d+</size>", f"<size>{len(packed)}</size>", new)
    new = re.sub(r"<open-size>\d+</open-size>", f"<open-size>{len(opened)}</open-size>", new)
    repomd_path.write_text(repomd.replace(section.group(0), new), encoding="utf-8")
