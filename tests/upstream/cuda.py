"""A CUDA download repository the way NVIDIA lays one out: ``compute/cuda/repos/<distro>/<arch>/``.

NVIDIA/cuda-repo-management (README and SIGNATURES.md) describes the apt flavour: a flat repository
whose root holds ``InRelease``, ``Release`` + ``Release.gpg``, ``Packages`` and ``Packages.gz``, and the
``.deb`` files, signed with the CUDA key (``3bf863cc``); the node side's sources line is
``deb [signed-by=…cuda-archive-keyring.gpg] https://developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>/ /``
and its pin file matches ``Label: NVIDIA CUDA``. The index lists the container toolkit's releases
among thousands of CUDA, library and driver packages.

Here the toolkit's packages are the loopback upstream's own (their stanzas copied as they are) and the
others are synthetic stanzas (names like ``cuda-nvcc-12-4``, ``libcublas-12-4``, ``nvidia-driver-550``)
whose files do not exist: a sync that asks for one fails with a 404.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

from tests.upstream.build import UpstreamTree
from tests.upstream.debs import FROZEN_DATE
from tests.upstream.keys import SigningKey

FAMILIES = (
    "cuda-nvcc",
    "cuda-cudart",
    "libcublas",
    "libcufft",
    "libcusparse",
    "libnpp",
    "cuda-nsight",
    "libcudnn9",
)


#: a paragraph the toolkit never needs, with a Size gpu-airgap's parser refuses: a sync that parsed
#: more than the toolkit's chain would fail on it (the tests' witness that the rest is only skipped)
UNPARSED = "Package: cuda-witness\nArchitecture: amd64\nVersion: 1.0-1\nFilename: ./cuda-witness_1.0-1_amd64.deb\nSize: unknown\n"


def synthetic_stanzas(count: int) -> list[str]:
    """``count`` Packages paragraphs of CUDA-like packages, about the size of the real ones."""
    stanzas = []
    for i in range(count):
        family = FAMILIES[i % len(FAMILIES)]
        name = f"{family}-12-{i // len(FAMILIES)}" if i % 11 else f"nvidia-driver-{400 + i // 11}"
        version = f"12.{i % 9}.{i}-1"
        digest = hashlib.sha512(name.encode()).hexdigest()
        stanzas.append(
            f"Package: {name}\nArchitecture: amd64\nVersion: {version}\nPriority: optional\nSection: devel\n"
            f"Maintainer: cudatools <cudatools@nvidia.com>\nInstalled-Size: {1000 + i}\n"
            f"Depends: cuda-toolkit-config-common (>= 12.{i % 9}), libc6 (>= 2.17)\n"
            f"Filename: ./{name}_{version}_amd64.deb\nSize: {40000 + i}\n"
            f"MD5sum: {digest[:32]}\nSHA1: {digest[:40]}\nSHA256: {digest[:64]}\nSHA512: {digest}\n"
            f"Description: CUDA component {name}\n Synthetic stand-in for one of the CUDA repository's packages.\n"
        )
    return stanzas


def build_cuda_repo(
    tree: UpstreamTree,
    site: Path,
    key: SigningKey,
    *,
    distro: str = "ubuntu2204",
    arch: str = "x86_64",
    others: int = 3000,
) -> Path:
    """Write ``site/compute/cuda/repos/<distro>/<arch>/`` holding the tree's stable deb/amd64 toolkit packages and ``others``."""
    repo = site / "compute" / "cuda" / "repos" / distro / arch
    repo.mkdir(parents=True)
    toolkit = tree.deb_repo("stable", "amd64")
    for deb in toolkit.glob("*.deb"):
        shutil.copyfile(deb, repo / deb.name)
    own = [p.strip("\n") + "\n" for p in (toolkit / "Packages").read_text().split("\n\n") if p.strip()]
    stanzas = sorted(own + synthetic_stanzas(others) + [UNPARSED], key=lambda s: s.split("\n", 1)[0])
    packages = "\n".join(stanzas).encode()
    files = {"Packages": packages, "Packages.gz": gzip.compress(packages, mtime=0)}
    for name, data in files.items():
        (repo / name).write_bytes(data)
    release = release_body(files, arch=arch)
    (repo / "Release").write_bytes(release)
    (repo / "Release.gpg").write_bytes(key.sign_detached(release))
    (repo / "InRelease").write_bytes(key.clearsign(release))
    (repo / f"{key.fingerprint[-8:].lower()}.pub").write_bytes(key.public_key_armored())
    return repo


def build_cuda_yum_repo(tree: UpstreamTree, site: Path, key: SigningKey, *, distro: str = "rhel9") -> Path:
    """Write ``site/compute/cuda/repos/<distro>/x86_64/``: the tree's stable x86_64 yum repo re-signed with the
    CUDA key (``repodata/repomd.xml`` + ``.asc`` + ``.key``, as NVIDIA/cuda-repo-management lists them).

    Unlike the apt flavour it holds only the toolkit's packages: what is checked here is the layout and the
    key, the size is :func:`build_cuda_repo`'s.
    """
    repo = site / "compute" / "cuda" / "repos" / distro / "x86_64"
    shutil.copytree(tree.rpm_repo("stable", "x86_64"), repo)
    repomd = repo / "repodata" / "repomd.xml"
    (repo / "repodata" / "repomd.xml.asc").write_bytes(key.sign_detached(repomd.read_bytes()))
    (repo / "repodata" / "repomd.xml.key").write_bytes(key.public_key_armored())
    return repo


def release_body(files: dict[str, bytes], *, arch: str) -> bytes:
    """A Release as apt-ftparchive writes one for a flat repository: MD5Sum, SHA1, SHA256 and SHA512 lists."""
    lines = [
        "Origin: NVIDIA",
        "Label: NVIDIA CUDA",
        f"Architecture: {arch}",
        f"Date: {FROZEN_DATE}",
    ]
    for field, algo in (("MD5Sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"), ("SHA512", "sha512")):
        lines.append(f"{field}:")
        lines += [f" {hashlib.new(algo, d).hexdigest()} {len(d):>16} {n}" for n, d in files.items()]
    return ("\n".join(lines) + "\n").encode("ascii")
