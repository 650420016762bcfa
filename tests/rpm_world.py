"""A minimal rpm-based root where NVIDIA's rpm scriptlets really run: a real rpm database, a shell and libc.

rpm runs ``%post``/``%preun``/``%posttrans`` chrooted into ``--root``, so the root needs ``/bin/sh``,
the tools those scriptlets call (``cp``, ``ln``, ``rm``, ``mkdir``, ``readlink``) and the C library
NVIDIA's Go binaries link against (``nvidia-ctk`` runs in ``-base``'s ``%post``). No RHEL or Fedora
repository is reachable offline, so ``dnf --installroot`` is out. What this module does instead, and why
it is the most real option that works here:

- The binaries are Debian 12's own, from the .debs ``scripts/prepare-debootstrap-cache`` already fetched
  for the debootstrap test (libc6, dash, coreutils and coreutils' libraries, libcap2, libseccomp2):
  real, working userland, the same bytes the debootstrap root runs.
- Each is repackaged with the real ``rpmbuild`` with automatic dependencies on, so its ``Provides``/
  ``Requires`` (``libc.so.6(GLIBC_2.34)(64bit)``, ``libacl.so.1()(64bit)``...) come from rpm's own ELF
  dependency generator reading those binaries, not from a list we typed. The only hand-written provide
  is ``rtld(GNU_HASH)`` on glibc, which Fedora's glibc.spec declares the same way.
- They are installed with the real ``rpm -i --root`` into a fresh ``rpm --initdb`` database, and rpm
  checks the whole set's dependencies; NVIDIA's real rpms are then installed with no ``--nodeps``.
- The library packages carry the Fedora/RHEL names the translated node requirements use (glibc,
  libcap, libseccomp: :data:`tests.upstream.catalog.RPM_SYSTEM_NAMES`); the rest keep Debian's names.

The stand-in-rpm alternative (a hand-seeded database whose provides merely claim glibc) would make
rpm's dependency check meaningless; an unpacked busybox would give no database at all.

:func:`rpm_world_tarball` builds the root once and caches it as a tarball keyed by the input .debs and
this file; :func:`rpm_world_missing` says why it cannot be built here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

from tests.live.cache import locked

CACHE = Path(os.environ.get("GPU_AIRGAP_TEST_CACHE") or Path.home() / ".cache" / "gpu-airgap-tests")
POOL = CACHE / "debootstrap" / "repo" / "pool"
ROOTS = CACHE / "rpm-world"
DBPATH = "/var/lib/rpm"
#: Debian package -> rpm name in the root (Fedora/RHEL names where the node requirements name them).
PACKAGES: Dict[str, str] = {
    "libc6": "glibc",
    "libcap2": "libcap",
    "libseccomp2": "libseccomp",
    "dash": "dash",
    "coreutils": "coreutils",
    "libacl1": "libacl1",
    "libattr1": "libattr1",
    "libgmp10": "libgmp10",
    "libselinux1": "libselinux1",
    "libpcre2-8-0": "libpcre2-8-0",
}
_EXTRA_PROVIDES = {"glibc": ("rtld(GNU_HASH)",)}
#: Directories a RHEL/Fedora node has owned by its filesystem, systemd and udev packages; rpm leaves
#: directories it had to create for a package behind on erase, so without an owner an uninstall
#: would not give back the tree it found.
FILESYSTEM_DIRS = (
    "/etc",
    "/tmp",
    "/var",
    "/var/lib",
    "/var/log",
    "/var/tmp",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/usr/lib64",
    "/usr/share",
    "/usr/share/doc",
    "/usr/share/licenses",
    "/usr/lib/systemd",
    "/usr/lib/systemd/system",
    "/usr/lib/systemd/system-preset",
    "/usr/lib/udev",
    "/usr/lib/udev/rules.d",
)
OS_RELEASE = (
    'NAME="gpu-airgap rpm world"\nID="gpu-airgap-rpm-world"\nID_LIKE="rhel fedora"\nVERSION_ID="1"\n'
    'PRETTY_NAME="Debian 12 binaries repackaged as rpms (gpu-airgap tests)"\n'
)


def rpm_world_missing() -> str:
    """Why the rpm world cannot be built here, or "" when it can."""
    if os.geteuid() != 0:
        return "the rpm-world root needs root (rpm runs scriptlets chrooted)"
    for tool in ("rpm", "rpmbuild", "dpkg-deb", "tar", "zstd"):
        if shutil.which(tool) is None:
            return f"the rpm-world root needs {tool} (make sysdeps installs it)"
    missing = [name for name in PACKAGES if not _debs(name)]
    if missing:
        return f"no {', '.join(missing)} .deb in {POOL}: run scripts/prepare-debootstrap-cache as root (make pytest does)"
    return ""


def _debs(name: str) -> List[Path]:
    return sorted(POOL.glob(f"{name}_*.deb")) if POOL.is_dir() else []


def _key() -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for name in PACKAGES:
        deb = _debs(name)[-1]
        digest.update(deb.name.encode() + hashlib.sha256(deb.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _rpm_version(deb_version: str) -> Tuple[str, str]:
    """``1:2.66-4+deb12u3+b1`` -> ``("2.66", "4+deb12u3+b1")``: rpm has no use for Debian's epoch here."""
    version = deb_version.split(":", 1)[-1]
    upstream, _, revision = version.rpartition("-")
    return (upstream, revision) if upstream else (version, "0")


def _spec(name: str, deb: Path, version: str, payload: Path) -> str:
    upstream, release = _rpm_version(version)
    files = sorted(
        "/" + str(p.relative_to(payload)) for p in payload.rglob("*") if p.is_symlink() or not p.is_dir()
    )
    lines = [
        "%define debug_package %{nil}",
        "%define __os_install_post %{nil}",
        "%define _build_id_links none",
        f"Name: {name}",
        f"Version: {upstream}",
        f"Release: {release}",
        f"Summary: Debian's {deb.name} repackaged as an rpm for the gpu-airgap tests",
        "License: see /usr/share/doc",
        "AutoReqProv: yes",
        *(f"Provides: {p}" for p in _EXTRA_PROVIDES.get(name, ())),
        "",
        "%description",
        f"The files of Debian's {deb.name}, unchanged.",
        "",
        "%install",
        f"cp -a {payload}/. %{{buildroot}}/",
        "",
        "%files",
        *(f'"{f}"' for f in files),
        "",
    ]
    return "\n".join(lines)


def _build_rpm(deb_name: str, rpm_name: str, work: Path, out: Path) -> Path:
    deb = _debs(deb_name)[-1]
    base = work / deb_name
    payload = base / "payload"
    payload.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(payload)], check=True, capture_output=True)
    version = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True, text=True
    ).stdout.strip()
    spec = base / f"{rpm_name}.spec"
    spec.write_text(_spec(rpm_name, deb, version, payload))
    defines = {
        "_topdir": str(base / "top"),
        "_rpmdir": str(out),
        "_build_name_fmt": "%%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
        # Debian installs shared libraries 0644; scan every ELF file for sonames, not only executables.
        "__elf_flags": "%{nil}",
        "_binary_payload": "w1.gzdio",
    }
    argv = ["rpmbuild", "-bb", "--quiet", "--target", "x86_64"]
    for key, value in defines.items():
        argv += ["--define", f"{key} {value}"]
    done = subprocess.run([*argv, str(spec)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"rpmbuild of {rpm_name} from {deb.name} failed: {done.stderr[-2000:]}")
    upstream, release = _rpm_version(version)
    return out / f"{rpm_name}-{upstream}-{release}.x86_64.rpm"


def _filesystem_rpm(work: Path, out: Path) -> Path:
    spec = work / "filesystem.spec"
    head = [
        "Name: filesystem",
        "Version: 1",
        "Release: 1",
        "Summary: the directories of an rpm node",
        "License: none",
    ]
    spec.write_text(
        "\n".join(
            [
                *head,
                "BuildArch: noarch",
                "",
                "%description",
                "Directories only.",
                "",
                "%install",
                *(f"mkdir -p %{{buildroot}}{d}" for d in FILESYSTEM_DIRS),
                "",
                "%files",
                *(f"%dir {d}" for d in FILESYSTEM_DIRS),
                "",
            ]
        )
    )
    argv = [
        "rpmbuild",
        "-bb",
        "--quiet",
        "--define",
        f"_topdir {work / 'fs-top'}",
        "--define",
        f"_rpmdir {out}",
    ]
    subprocess.run([*argv, str(spec)], check=True, capture_output=True)
    return out / "noarch" / "filesystem-1-1.noarch.rpm"


def build_rpm_world(root: Path, work: Path) -> None:
    """Build the system rpms into ``work`` and install them into the new root ``root`` with a fresh rpm database."""
    rpms = work / "rpms"
    rpms.mkdir(parents=True)
    built = [
        _filesystem_rpm(work, rpms),
        *(_build_rpm(deb, name, work, rpms) for deb, name in PACKAGES.items()),
    ]
    root.mkdir(parents=True)
    rpm = ["rpm", "--root", str(root), "--dbpath", DBPATH]
    subprocess.run([*rpm, "--initdb"], check=True, capture_output=True)
    done = subprocess.run([*rpm, "-i", *map(str, built)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"rpm -i of the system rpms failed: {done.stderr[-3000:]}")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_text(OS_RELEASE)
    (root / "tmp").chmod(0o1777)
    # The device nodes debootstrap makes too: scriptlets redirect to /dev/null, and rpm mounts nothing.
    (root / "dev").mkdir()
    for name, minor in (("null", 3), ("zero", 5), ("full", 7), ("random", 8), ("urandom", 9)):
        os.mknod(root / "dev" / name, stat.S_IFCHR | 0o666, os.makedev(1, minor))


def rpm_world_tarball() -> Path:
    """The cached tarball of the rpm world (built now when absent; atomic, one per key)."""
    ROOTS.mkdir(parents=True, exist_ok=True)
    final = ROOTS / f"{_key()}.tar.zst"
    # Under a lock: parallel pytest workers share one build instead of each making its own.
    with locked(ROOTS / "build.lock"), tempfile.TemporaryDirectory(dir=ROOTS, prefix="build-") as tmp:
        if final.is_file():
            return final
        root = Path(tmp) / "root"
        build_rpm_world(root, Path(tmp) / "work")
        partial = Path(tmp) / "root.tar.zst"
        subprocess.run(
            ["tar", "--numeric-owner", "-I", "zstd -T0 -3", "-C", str(root), "-cf", str(partial), "."],
            check=True,
            capture_output=True,
        )
        for old in ROOTS.glob("*.tar.zst"):
            old.unlink()
        os.replace(partial, final)
    return final


def unpack(tarball: Path, root: Path) -> Path:
    """Unpack a cached root tarball into the new directory ``root``."""
    root.mkdir(parents=True)
    subprocess.run(
        ["tar", "--numeric-owner", "-I", "zstd", "-C", str(root), "-xf", str(tarball)],
        check=True,
        capture_output=True,
    )
    return root
