"""Scratch node roots with real dpkg and rpm databases, and stand-in toolkit packages to install into them.

The packages are built with the real ``dpkg-deb`` and ``rpmbuild`` and carry the real dependency
chain (libnvidia-container1 -> tools -> toolkit-base -> toolkit, plus libc6/libcap2/libseccomp2 or
glibc/libcap/libseccomp). The roots are seeded so the node requirements are satisfied: dpkg with
status entries for the libraries (nothing to unpack), rpm with tiny stand-in rpms installed
through ``rpm --root`` itself, so ``rpm -q --whatprovides`` answers from a real database.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from installer.target import Requirement, StagedPackage, StagedTarget

TOOLKIT = (
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
)
BREAKS = (
    Requirement("nvidia-container-runtime", "<=", "3.5.0-1"),
    Requirement("nvidia-container-runtime-hook"),
)
DEB_REQUIREMENTS = ("libc6 (>= 2.14)", "libcap2 (>= 1:2.10)", "libseccomp2 (>= 0.0.0~20120605)")
RPM_REQUIREMENTS = ("glibc >= 2.17", "libcap >= 2.10", "libseccomp")
DEB_SEED = {"libc6": "2.36-9", "libcap2": "1:2.66-4", "libseccomp2": "2.5.4-1"}
RPM_SEED = {"glibc": "2.34", "libcap": "2.48", "libseccomp": "2.5.2"}
#: the python3 a node has in the tests: 3.9 (the oldest the node side supports) when installed here
PY39 = Path("/root/.pyenv/versions/3.9.18/bin/python3.9")
CONTAINERD_CONFIG = b'# the node\'s own config\nversion = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "runc"\n'


#: the node's own tools the node command and install.sh use, and nothing else
NODE_TOOLS = (
    "sh",
    "tar",
    "zstd",
    "gpg",
    "gpgv",
    "sha256sum",
    "grep",
    "dirname",
    "cut",
    "od",
    "tr",
    "mktemp",
    "rm",
    "cp",
)


def node_tools_dir(path: Path) -> Path:
    """A PATH directory at ``path`` with only :data:`NODE_TOOLS` (links to the system's) and the node's python3."""
    path.mkdir(exist_ok=True)
    for tool in NODE_TOOLS:
        found = next(Path(d) / tool for d in ("/usr/bin", "/bin") if (Path(d) / tool).exists())
        (path / tool).symlink_to(found)
    (path / "python3").symlink_to(node_python())
    return path


def node_python() -> Path:
    """The node's python3: 3.9.18 when this machine has it, else the system python3 (never the venv's)."""
    return PY39 if PY39.exists() else Path("/usr/bin/python3")


def _files_for(name: str, version: str) -> Dict[str, Tuple[str, int]]:
    up = version.rsplit("-", 1)[0]
    tools = {
        "libnvidia-container1": ["libnvidia-container-stand-in"],
        "libnvidia-container-tools": ["nvidia-container-cli"],
        "nvidia-container-toolkit-base": ["nvidia-ctk", "nvidia-container-runtime"],
        "nvidia-container-toolkit": ["nvidia-container-runtime-hook"],
    }.get(name, [name])
    return {f"usr/bin/{t}": (f'#!/bin/sh\necho "{t} version {up} (stand-in)"\n', 0o755) for t in tools}


def _deb_depends(name: str, version: str) -> str:
    up = version.rsplit("-", 1)[0]
    return {
        "libnvidia-container1": "libc6 (>= 2.27), libcap2 (>= 1:2.10), libseccomp2 (>= 0.0.0~20120605)",
        "libnvidia-container-tools": f"libnvidia-container1 (>= {up}), libc6 (>= 2.14), libcap2 (>= 1:2.10)",
        "nvidia-container-toolkit-base": "",
        "nvidia-container-toolkit": f"nvidia-container-toolkit-base (= {version}), libnvidia-container-tools (>= {version})",
    }.get(name, "")


def build_deb(
    out: Path, name: str, version: str, arch: str = "amd64", depends: str = "", breaks: str = ""
) -> Path:
    """Build ``name_version_arch.deb`` with dpkg-deb."""
    work = out / f"build-{name}-{version}"
    (work / "DEBIAN").mkdir(parents=True)
    control = f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: gpu-airgap tests <t@example.invalid>\n"
    control += f"Depends: {depends}\n" if depends else ""
    control += f"Breaks: {breaks}\nReplaces: {breaks}\n" if breaks else ""
    control += f"Description: {name} stand-in\n"
    (work / "DEBIAN/control").write_text(control)
    for rel, (body, mode) in _files_for(name, version).items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        path.chmod(mode)
    target = out / f"{name}_{version}_{arch}.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(work), str(target)],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(work)
    return target


def build_rpm(
    out: Path, name: str, version: str, arch: str = "x86_64", requires: Sequence[str] = (), files: bool = True
) -> Path:
    """Build ``name-version.arch.rpm`` with rpmbuild (``version`` is ``V-R``)."""
    ver, rel = version.rsplit("-", 1)
    top = out / f"rpmbuild-{name}-{version}"
    install_lines = []
    file_lines = []
    for path, (body, mode) in (
        _files_for(name, version) if files else {f"usr/share/doc/{name}/README": ("stand-in\n", 0o644)}
    ).items():
        install_lines.append(f"mkdir -p %{{buildroot}}/{Path(path).parent}")
        install_lines.append(f"printf '%s' {_sh_quote(body)} > %{{buildroot}}/{path}")
        install_lines.append(f"chmod {mode:o} %{{buildroot}}/{path}")
        file_lines.append(f"/{path}")
    spec = textwrap.dedent(
        f"""\
        Name: {name}
        Version: {ver}
        Release: {rel}
        Summary: {name} stand-in
        License: Apache-2.0
        BuildArch: {arch}
        AutoReqProv: no
        """
    )
    spec += "".join(f"Requires: {r}\n" for r in requires)
    spec += (
        "\n%description\nstand-in\n\n%install\n"
        + "\n".join(install_lines)
        + "\n\n%files\n"
        + "\n".join(file_lines)
        + "\n"
    )
    top.mkdir(parents=True)
    (top / "p.spec").write_text(spec)
    defines = [
        "_topdir " + str(top),
        "debug_package %{nil}",
        "__os_install_post %{nil}",
        "_build_id_links none",
    ]
    argv = ["rpmbuild", "-bb", "--quiet"]
    for d in defines:
        argv += ["--define", d]
    subprocess.run([*argv, str(top / "p.spec")], check=True, capture_output=True)
    built = next((top / "RPMS" / arch).glob("*.rpm"))
    target = out / built.name
    shutil.move(str(built), target)
    shutil.rmtree(top)
    return target


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _rpm_requires(name: str, version: str) -> List[str]:
    return {
        "libnvidia-container1": ["glibc >= 2.17", "libcap >= 2.10", "libseccomp"],
        "libnvidia-container-tools": [f"libnvidia-container1 >= {version}", "glibc >= 2.17"],
        "nvidia-container-toolkit-base": [],
        "nvidia-container-toolkit": [
            f"nvidia-container-toolkit-base = {version}",
            f"libnvidia-container-tools >= {version}",
        ],
    }.get(name, [])


def build_target(out: Path, fmt: str, version: str, arch: str) -> StagedTarget:
    """Build the four packages of ``version`` for one target and describe them as staged."""
    out.mkdir(parents=True, exist_ok=True)
    packages = []
    for name in TOOLKIT:
        if fmt == "deb":
            breaks = (
                "nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook"
                if "toolkit" in name
                else ""
            )
            path = build_deb(out, name, version, arch, _deb_depends(name, version), breaks)
        else:
            path = build_rpm(out, name, version, arch, _rpm_requires(name, version))
        deps = tuple(
            n
            for n in TOOLKIT
            if n in (_deb_depends(name, version) if fmt == "deb" else " ".join(_rpm_requires(name, version)))
        )
        packages.append(
            StagedPackage(
                name,
                version,
                arch,
                path,
                path.stat().st_size,
                depends=deps,
                breaks=BREAKS if "toolkit" in name else (),
            )
        )
    reqs = DEB_REQUIREMENTS if fmt == "deb" else RPM_REQUIREMENTS
    return StagedTarget(
        f"{fmt}-{arch}", fmt, arch, tuple(packages), tuple(Requirement.parse(r) for r in reqs)
    )


def seed_dpkg_root(
    root: Path,
    os_release: str = 'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n',
    libraries: Dict[str, str] = DEB_SEED,
) -> None:
    """A Debian-like root: an empty-but-real dpkg database with the node libraries as installed entries."""
    admin = root / "var/lib/dpkg"
    for sub in ("info", "updates", "triggers"):
        (admin / sub).mkdir(parents=True, exist_ok=True)
    (admin / "available").write_text("")
    stanzas = []
    for name, version in libraries.items():
        stanzas.append(
            f"Package: {name}\nStatus: install ok installed\nPriority: optional\nSection: libs\n"
            f"Maintainer: stand-in <t@example.invalid>\nArchitecture: amd64\nVersion: {version}\nDescription: {name} stand-in\n"
        )
        (admin / "info" / f"{name}.list").write_text("")
    (admin / "status").write_text("\n".join(stanzas) + ("\n" if stanzas else ""))
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_text(os_release)


def seed_containerd_node(root: Path) -> Path:
    """A Debian-like scratch node: :func:`seed_dpkg_root` plus containerd's config (CONTAINERD_CONFIG)."""
    seed_dpkg_root(root)
    (root / "etc/containerd").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_bytes(CONTAINERD_CONFIG)
    return root


def seed_rpm_root(root: Path, packages_dir: Path, libraries: Dict[str, str] = RPM_SEED) -> None:
    """A RHEL-like root: ``rpm --initdb`` at /var/lib/rpm, then stand-in glibc/libcap/libseccomp installed."""
    subprocess.run(
        ["rpm", "--root", str(root), "--dbpath", "/var/lib/rpm", "--initdb"], check=True, capture_output=True
    )
    files = []
    for name, version in libraries.items():
        existing = list(packages_dir.glob(f"{name}-{version}-1.*.rpm"))
        files.append(existing[0] if existing else build_rpm(packages_dir, name, f"{version}-1", files=False))
    if files:
        subprocess.run(
            ["rpm", "--root", str(root), "--dbpath", "/var/lib/rpm", "-i", *map(str, files)],
            check=True,
            capture_output=True,
        )
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_text('ID="rhel"\nID_LIKE="fedora"\nVERSION_ID="9.4"\n')


def rpm_query(root: Path) -> List[str]:
    """``rpm -q`` on the database under ``root``: a ``NAME VERSION-RELEASE`` line per package named after it."""
    database = ["--root", str(root), "--dbpath", "/var/lib/rpm"]
    return ["rpm", *database, "-q", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\n"]


def dpkg_versions(root: Path, names: Sequence[str] = TOOLKIT) -> Dict[str, str]:
    """``{package: version}`` of ``names`` installed in the dpkg database under ``root`` (others left out)."""
    out = subprocess.run(
        [
            "dpkg-query",
            f"--admindir={root}/var/lib/dpkg",
            "-W",
            "-f=${Package} ${db:Status-Abbrev} ${Version}\n",
            *names,
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {line.split()[0]: line.split()[2] for line in out.splitlines() if line.split()[1][1:2] == "i"}


def tree_digest(root: Path) -> Dict[str, str]:
    """Every path under ``root`` with its type, mode and content digest (to prove nothing changed)."""
    out: Dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        st = path.lstat()
        if path.is_symlink():
            out[rel] = "link:" + str(path.readlink())
        elif path.is_dir():
            out[rel] = f"dir:{st.st_mode:o}"
        else:
            out[rel] = f"file:{st.st_mode:o}:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def write_signed_bundle(
    out: Path,
    targets: Sequence[StagedTarget],
    key_home: Path,
    fingerprint: str,
    release: str = "1.17.8",
    *,
    tamper: bool = False,
    split: Optional[int] = None,
) -> Path:
    """Write a real signed bundle (manifest + detached signature + packages) readable by ``installer.bundle``.

    A trimmed version of what ``bundle build`` writes: no zipapp or repo metadata, which the node
    installer does not read. Signed with the real gpg key in ``key_home``. ``tamper`` flips one
    byte of the first package after signing (same size, wrong sha256). ``split`` writes parts of
    that size (plus an incompressible filler member so there are several) and the signed
    checksum list, and returns the first part.
    """
    from installer.manifest import (
        MANIFEST_NAME,
        SIGNATURE_NAME,
        FileEntry,
        Manifest,
        PackageEntry,
        Provenance,
        TargetEntry,
    )
    from mirror.bundle.tar import BundleWriter

    entries = []
    members: Dict[str, Path] = {}
    for target in targets:
        packages = []
        for order, pkg in enumerate(install_order_of(target)):
            member = f"targets/{target.name}/{pkg.path.name}"
            members[member] = pkg.path
            digest = hashlib.sha256(pkg.path.read_bytes()).hexdigest()
            breaks = tuple(str(r) if target.format == "deb" else _rpm_text(r) for r in pkg.breaks)
            packages.append(
                PackageEntry(
                    pkg.name,
                    pkg.version,
                    pkg.arch,
                    member,
                    pkg.size,
                    digest,
                    order,
                    pkg.depends,
                    breaks=breaks,
                )
            )
        entries.append(
            TargetEntry(
                format=target.format,
                arch=target.arch,
                repo_dir=f"targets/{target.name}",
                toolkit_version=target.packages[0].version,
                provenance=Provenance(
                    "http://127.0.0.1/stand-in", "C95B321B61E88C1809C4F759DDCAE044F796ECB0", None
                ),
                packages=tuple(packages),
                node_requirements=tuple(
                    str(r) if target.format == "deb" else _rpm_text(r) for r in target.requirements
                ),
            )
        )
    filler = hashlib.shake_256(b"filler").digest(3 * split // 2) if split else b""
    manifest = Manifest(
        tool_version="0.1.0",
        created="2026-11-30T00:00:00Z",
        channel="stable",
        toolkit_version=release,
        upstream_url="http://127.0.0.1/stand-in",
        upstream_fingerprint="C95B321B61E88C1809C4F759DDCAE044F796ECB0",
        signer=fingerprint,
        targets=tuple(entries),
        files=(FileEntry("filler.bin", len(filler), hashlib.sha256(filler).hexdigest()),) if filler else (),
    )
    data = manifest.to_json()

    def sign(payload: bytes) -> bytes:
        return subprocess.run(
            [
                "gpg",
                "--homedir",
                str(key_home),
                "--batch",
                "--armor",
                "--detach-sign",
                "--local-user",
                fingerprint,
            ],
            input=payload,
            check=True,
            capture_output=True,
        ).stdout

    signature = sign(data)
    out.parent.mkdir(parents=True, exist_ok=True)
    with BundleWriter(out, compression="gzip", mtime=0, split=split) as writer:
        writer.add_bytes(MANIFEST_NAME, data)
        writer.add_bytes(SIGNATURE_NAME, signature)
        if filler:
            writer.add_bytes("filler.bin", filler)
        for index, member in enumerate(sorted(members)):
            source = members[member]
            if tamper and index == 0:
                bad = out.parent / (source.name + ".tampered")
                raw = bytearray(source.read_bytes())
                raw[-1] ^= 0xFF
                bad.write_bytes(bytes(raw))
                source = bad
            writer.add_file(member, source, size=source.stat().st_size)
        parts = writer.commit()
    if split is None:
        return out
    listing = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in parts).encode()
    out.with_name(out.name + ".sha256sums").write_bytes(listing)
    out.with_name(out.name + ".sha256sums.asc").write_bytes(sign(listing))
    return parts[0]


def install_order_of(target: StagedTarget) -> List[StagedPackage]:
    """The target's packages in dependency order."""
    from installer.target import install_order

    return install_order(target.packages)


def _rpm_text(req: Requirement) -> str:
    op = {"<<": "<", ">>": ">"}.get(req.op or "", req.op)
    return f"{req.name} {op} {req.version}" if req.op else req.name
