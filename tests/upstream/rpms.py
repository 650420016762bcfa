"""Yum repositories the way NVIDIA publishes them: ``.rpm`` files, createrepo_c repodata, repomd.xml.asc.

Each stand-in rpm is built by the real ``rpmbuild`` from a generated spec whose Requires /
Conflicts / Obsoletes are the deb Depends / Breaks / Replaces in rpm syntax
(:func:`tests.upstream.catalog.rpm_relations`). ``AutoReqProv: no`` keeps rpmbuild from adding
``/bin/sh`` and soname requirements, so the relations are exactly the translated ones.

File digests are NVIDIA's (:func:`file_digest_algo`): MD5 up to 1.18.0, SHA256 from 1.18.1, so a
1.17.8 stand-in fails on a FIPS node exactly as NVIDIA's 1.17.8 does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final

from plumbing.proc import run
from tests.upstream.catalog import PackageSpec, payload_for, rpm_relations
from tests.upstream.debs import SOURCE_DATE_EPOCH, padding_file
from tests.upstream.keys import SigningKey

_PAD_NAME: Final = "gpu-airgap-padding.bin"
_RELATION_TAGS: Final = (("Depends", "Requires"), ("Breaks", "Conflicts"), ("Replaces", "Obsoletes"))
#: rpm's FILEDIGESTALGO values (RFC 4880 hash ids): MD5 and SHA256
MD5, SHA256 = 1, 8
#: packages NVIDIA stopped building before the SHA256 rebuilds; every rpm of theirs carries MD5
_LEGACY: Final = ("nvidia-container-runtime", "nvidia-docker2")


def file_digest_algo(spec: PackageSpec) -> int:
    """The file digest algorithm of NVIDIA's own rpm of ``spec``.

    NVIDIA's rpms carried MD5 file digests (``rpm --checksig``: "Header SHA1 digest, MD5 digest") up to
    and including 1.18.0; NVIDIA/nvidia-container-toolkit#1411 rebuilt them with SHA256 digests from
    1.18.1 on (FIPS hosts and RPM 6 refuse MD5/SHA-1: #1476, #1307).
    """
    if spec.name in _LEGACY:
        return MD5
    release = tuple(int(part) for part in spec.upstream_version.split("~")[0].split("."))
    return SHA256 if release >= (1, 18, 1) else MD5


def _description(spec: PackageSpec) -> tuple[str, str]:
    """(Summary, %description) from the deb Description."""
    raw = spec.field("Description") or spec.name
    first, *rest = raw.split("\n")
    body = "\n".join("" if line.strip() == "." else line[1:] for line in rest)
    return first, body or first


def spec_text(spec: PackageSpec, *, payload_dir: Path, with_padding: bool) -> str:
    """The rpm spec file of ``spec``; ``%install`` copies the prepared ``payload_dir``."""
    summary, description = _description(spec)
    head = [
        "%define debug_package %{nil}",
        "%define __os_install_post %{nil}",
        "%define _build_id_links none",
        f"Name: {spec.name}",
        f"Version: {spec.upstream_version}",
        f"Release: {spec.revision}",
        f"Summary: {summary}",
        "License: Apache-2.0",
        f"URL: {spec.field('Homepage') or ''}",
        "AutoReqProv: no",
    ]
    if spec.arch == "all":
        head.append("BuildArch: noarch")
    for deb_field, rpm_tag in _RELATION_TAGS:
        head += [f"{rpm_tag}: {rel}" for rel in rpm_relations(spec.field(deb_field))]
    files = []
    for item in payload_for(spec.name, spec.version, spec.arch, rpm=True):
        files.append(f"%config(noreplace) {item.path}" if item.conffile else item.path)
    if with_padding:
        files.append(f"/usr/share/{spec.name}/{_PAD_NAME}")
    return "\n".join(
        [
            *head,
            "",
            "%description",
            description,
            "",
            "%install",
            f"cp -a {payload_dir}/. %{{buildroot}}/",
            "",
            "%files",
            *files,
            "",
        ]
    )


def build_rpm(spec: PackageSpec, out_dir: Path, work_dir: Path, *, payload_mb: float = 0.0) -> Path:
    """Build ``spec`` for its rpm architecture with ``rpmbuild -bb`` into ``out_dir``."""
    base = work_dir / f"rpm-{spec.name}-{spec.version}-{spec.rpm_arch}"
    shutil.rmtree(base, ignore_errors=True)
    payload = base / "payload"
    payload.mkdir(parents=True)
    for item in payload_for(spec.name, spec.version, spec.arch, rpm=True):
        target = payload / item.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.content)
        os.chmod(target, item.mode)
    pad = padding_file(spec, payload_mb)
    if pad:
        target = payload / "usr/share" / spec.name / _PAD_NAME
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(pad)
    spec_file = base / f"{spec.name}.spec"
    spec_file.write_text(spec_text(spec, payload_dir=payload, with_padding=bool(pad)), encoding="utf-8")
    target_arch = "noarch" if spec.arch == "all" else spec.rpm_arch
    defines = {
        "_topdir": str(base / "top"),
        "_rpmdir": str(out_dir),
        "_build_name_fmt": "%%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
        "source_date_epoch_from_changelog": "0",
        "use_source_date_epoch_as_buildtime": "1",
        "clamp_mtime_to_source_date_epoch": "1",
        "_buildhost": "gpu-airgap-stand-in",
        "_binary_filedigest_algorithm": str(file_digest_algo(spec)),
        # Random padding does not compress; do not spend time trying.
        "_binary_payload": "w1.gzdio" if pad else "w9.xzdio",
    }
    argv = ["rpmbuild", "-bb", "--quiet", "--target", target_arch]
    for name, value in defines.items():
        argv += ["--define", f"{name} {value}"]
    run([*argv, str(spec_file)], env_overrides={"SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}, timeout=600)
    shutil.rmtree(base, ignore_errors=True)
    out = out_dir / spec.rpm_filename
    if not out.exists():
        raise RuntimeError(f"rpmbuild did not produce {out}")
    return out


def write_repodata(repo_dir: Path, *, key: SigningKey) -> None:
    """Run createrepo_c like NVIDIA (sha512, ``<sha512>-primary.xml.gz``, no sqlite) and sign repomd.xml."""
    run(
        [
            "createrepo_c",
            "--quiet",
            "--checksum",
            "sha512",
            "--unique-md-filenames",
            "--no-database",
            "--general-compress-type",
            "gz",
            "--revision",
            "1.0",
            str(repo_dir),
        ],
        timeout=600,
    )
    repomd = repo_dir / "repodata" / "repomd.xml"
    (repo_dir / "repodata" / "repomd.xml.asc").write_bytes(key.sign_detached(repomd.read_bytes()))
