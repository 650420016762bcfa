"""The node's own package manager behind one seam: :class:`PackageBackend`, with dpkg and rpm.

Every command goes through :func:`plumbing.proc.run` and honours ``--root`` the way the tools
themselves do: ``dpkg --root=DIR`` (whose admin directory is ``DIR/var/lib/dpkg``),
``dpkg-query --admindir=DIR/var/lib/dpkg``, and ``rpm --root DIR --dbpath PATH`` (``PATH`` is the
database the node itself uses, found under the root; passing it explicitly matters because some
hosts, Debian's rpm for one, default to ``~/.rpmdb``).

Maintainer scripts: with ``--root`` dpkg and rpm chroot into the root to run them, which is right
for a node image or chroot with a real userland. We do not pass ``--force-script-chrootless`` or
``--noscripts``: the first would run the packages' scripts against the *host*, the second would
silently skip steps (ldconfig) the real node needs. A script that fails is named in
:class:`MaintainerScriptFailed` (parsed from dpkg's and rpm's own messages); rpm only *warns* when a
``%post``/``%posttrans`` fails and still exits 0, so its warnings are read too.

:class:`FakeBackend` records calls for the pure unit tests of preflight and orchestration.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Protocol, Sequence, Tuple

from configure.changes import write_config
from installer import debversion
from installer.preflight import satisfies
from installer.target import Requirement
from plumbing import proc
from plumbing.errors import CommandError, ToolError
from plumbing.fsutil import is_live_root, rooted

VERSIONLOCK = "/etc/dnf/plugins/versionlock.list"
_SAFE_VERSION = re.compile(r"^[A-Za-z0-9.:~^+_-]+$")


class PackageBackend(Protocol):
    """What the installer needs from dpkg or rpm (pipx ``backends/_base.py`` style)."""

    name: str  #: "dpkg" or "rpm"

    def installed_version(self, name: str) -> Optional[str]:
        """The installed version of ``name`` or None (half-installed counts as not installed)."""
        ...

    def installed_versions(self, names: Sequence[str]) -> Dict[str, Optional[str]]:
        """:meth:`installed_version` of each of ``names``, asked at once where the tool allows."""
        ...

    def package_state(self, name: str) -> str:
        """A human phrase for ``name``'s state: ``1.17.8-1 (installed)``, ``not installed``, ..."""
        ...

    def provides(self, requirement: Requirement) -> bool:
        """True when an installed package satisfies ``requirement`` (name and version constraint)."""
        ...

    def compare_versions(self, a: str, b: str) -> int:
        """-1, 0 or 1 as ``a`` is older than, equal to or newer than ``b``."""
        ...

    def install(self, files: Sequence[Path], *, allow_downgrade: bool = False) -> None:
        """Install ``files`` (already in dependency order) in one transaction."""
        ...

    def remove(self, names: Sequence[str], *, purge: bool = False) -> None:
        """Remove ``names`` (already in reverse dependency order); ``purge`` also drops their config files (dpkg)."""
        ...

    def without_trace(self, names: Sequence[str]) -> List[str]:
        """Those of ``names`` (not installed) of which the database keeps nothing, not even config files."""
        ...

    def hold(self, names: Sequence[str]) -> None:
        """Keep ``names`` at their installed versions (apt-mark hold / dnf versionlock)."""
        ...

    def unhold(self, names: Sequence[str]) -> None:
        """Undo :meth:`hold`."""
        ...


_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def package_manager_env() -> Dict[str, str]:
    """PATH for dpkg and rpm runs: theirs must hold the sbin directories.

    dpkg refuses to run without ``ldconfig`` and ``start-stop-daemon`` on PATH, and maintainer
    scripts call tools from sbin; an admin's ``sudo`` or a minimal ``env -i`` PATH may lack them.
    """
    parts = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p]
    return {"PATH": os.pathsep.join([*parts, *(d for d in _SBIN_DIRS if d not in parts)])}


@dataclass(frozen=True)
class ScriptFailure:
    """One maintainer script that failed, as dpkg or rpm reported it."""

    package: str
    script: str  #: ``postinst``, ``preinst``... (dpkg) or ``%post``, ``%pre``, ``%posttrans``... (rpm)
    status: str  #: ``exit status 1``, ``killed by signal (Terminated)``...
    output: str = ""  #: the last line the script printed before dpkg/rpm reported it, if any

    def __str__(self) -> str:
        said = f", after printing {self.output[:200]!r}" if self.output else ""
        return f"the {self.script} script of {self.package} failed with {self.status}{said}"


class MaintainerScriptFailed(CommandError):
    """dpkg or rpm ran a package's maintainer script and it failed; ``failures`` names each one."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str, failures: Sequence[ScriptFailure]) -> None:
        super().__init__(argv, returncode, stderr)
        self.failures = list(failures)
        self.args = ("; ".join(str(f) for f in self.failures),)


_DPKG_SCRIPTS = {
    "pre-installation": "preinst",
    "post-installation": "postinst",
    "pre-removal": "prerm",
    "post-removal": "postrm",
}
_DPKG_FAILURE = re.compile(
    r"^\s*(?:installed|new|old) (\S+?)(?::\S+)? package (pre-installation|post-installation|pre-removal|post-removal)"
    r" script subprocess (returned error exit status \d+|was killed by signal .*)$"
)
_RPM_FAILURE = re.compile(r"^(?:warning|error): %(\w+)\((\S+)\) scriptlet failed, (exit status \d+|signal \d+)")


def _previous_output(lines: List[str], index: int, own: Tuple[str, ...]) -> str:
    """The script's own last line before ``lines[index]`` (dpkg's and rpm's own lines do not count)."""
    for line in reversed(lines[max(0, index - 2) : index]):
        if line.strip() and not line.startswith(own):
            return line.strip()
    return ""


def dpkg_script_failures(stderr: str) -> List[ScriptFailure]:
    """Every failed maintainer script in dpkg's stderr (``... post-installation script subprocess returned ...``)."""
    lines = stderr.splitlines()
    found = []
    for index, line in enumerate(lines):
        match = _DPKG_FAILURE.match(line)
        if match:
            package, kind, status = match.groups()
            status = status.replace("returned error ", "").replace("was killed", "killed")
            output = _previous_output(lines, index - 1, ("dpkg", " ")) if index else ""
            found.append(ScriptFailure(package, _DPKG_SCRIPTS[kind], status, output))
    return found


def rpm_script_failures(stderr: str) -> List[ScriptFailure]:
    """Every failed scriptlet in rpm's stderr (``warning: %post(NAME-V-R.ARCH) scriptlet failed, exit status 1``)."""
    lines = stderr.splitlines()
    found = []
    for index, line in enumerate(lines):
        match = _RPM_FAILURE.match(line)
        if match:
            tag, nevra, status = match.groups()
            script = "%pre" if tag == "prein" else f"%{tag}"
            output = _previous_output(lines, index, ("warning:", "error:", "rpm:"))
            found.append(ScriptFailure(nevra.rsplit("-", 2)[0], script, status, output))
    return found


def _check_version(version: str) -> str:
    if not _SAFE_VERSION.match(version):
        raise ToolError(f"refusing the version string {version!r}: it has characters no package version uses")
    return version


class DpkgBackend:
    """dpkg and dpkg-query on a Debian-family node or root."""

    name = "dpkg"

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        scratch = not is_live_root(root)
        self._dpkg = ["dpkg", f"--root={os.path.abspath(root)}"] if scratch else ["dpkg"]
        admindir = os.path.abspath(rooted(root, "/var/lib/dpkg"))
        self._query = ["dpkg-query", f"--admindir={admindir}"] if scratch else ["dpkg-query"]
        #: name -> (status abbrev, version) from the last :meth:`installed_versions`; cleared by every change
        self._seen: Dict[str, Tuple[str, str]] = {}

    def installed_versions(self, names: Sequence[str]) -> Dict[str, Optional[str]]:
        """See :meth:`PackageBackend.installed_versions`: one dpkg-query, remembered until dpkg changes something."""
        self._seen = self._states(names)
        return {name: self.installed_version(name) for name in names}

    def _states(self, names: Sequence[str]) -> Dict[str, Tuple[str, str]]:
        states = {name: ("", "") for name in names}
        if names:
            result = proc.run([*self._query, "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Version}\n", *names], check=False)
            for line in result.stdout.decode("utf-8", "replace").splitlines():
                name, _, rest = line.partition("\t")
                if name in states:
                    abbrev, _, version = rest.partition("\t")
                    states[name] = (abbrev, version)
        return states

    def _status(self, name: str) -> Tuple[str, str]:
        if name in self._seen:
            return self._seen[name]
        result = proc.run([*self._query, "-W", "-f=${db:Status-Abbrev}\t${Version}\n", name], check=False)
        line = result.stdout.decode("utf-8", "replace").strip().splitlines()
        if result.returncode != 0 or not line:
            return "", ""
        abbrev, _, version = line[-1].partition("\t")
        return abbrev, version

    def installed_version(self, name: str) -> Optional[str]:
        """See :meth:`PackageBackend.installed_version`."""
        abbrev, version = self._status(name)
        return version if len(abbrev) >= 2 and abbrev[1] == "i" else None

    def package_state(self, name: str) -> str:
        """See :meth:`PackageBackend.package_state`."""
        abbrev, version = self._status(name)
        if len(abbrev) < 2 or abbrev[1] in ("n", " "):
            return "not installed"
        phrase = {
            "i": "installed",
            "c": "removed, config files remain",
            "U": "unpacked, not configured",
            "F": "half-configured",
            "H": "half-installed",
            "W": "awaiting triggers",
            "t": "triggers pending",
        }.get(abbrev[1], f"dpkg state {abbrev.strip()}")
        return f"{version} ({phrase})"

    def compare_versions(self, a: str, b: str) -> int:
        """See :meth:`PackageBackend.compare_versions` (dpkg's algorithm in process: :mod:`installer.debversion`)."""
        return debversion.compare(_check_version(a), _check_version(b))

    def provides(self, requirement: Requirement) -> bool:
        """See :meth:`PackageBackend.provides`."""
        version = self.installed_version(requirement.name)
        if version is None:
            return False
        if not requirement.op or not requirement.version:
            return True
        return debversion.satisfied(_check_version(version), requirement.op, _check_version(requirement.version))

    def install(self, files: Sequence[Path], *, allow_downgrade: bool = False) -> None:
        """``dpkg -i`` all files at once, so dpkg orders the configuration itself (downgrades are allowed by dpkg).

        :raises MaintainerScriptFailed: naming each script that failed; :raises CommandError: any other failure.
        """
        argv = [*self._dpkg, "--install", *(str(f) for f in files)]
        self._seen = {}
        result = proc.run(argv, env_overrides=package_manager_env(), check=False)
        if result.returncode != 0:
            stderr = result.stderr.decode("utf-8", "replace")
            failures = dpkg_script_failures(stderr)
            if failures:
                raise MaintainerScriptFailed(argv, result.returncode, stderr, failures)
            raise CommandError(argv, result.returncode, stderr)

    def remove(self, names: Sequence[str], *, purge: bool = False) -> None:
        """``dpkg --remove`` (conffiles stay, as with ``apt remove``), or ``--purge``."""
        self._seen = {}
        if names:
            proc.run([*self._dpkg, "--purge" if purge else "--remove", *names], env_overrides=package_manager_env())

    def without_trace(self, names: Sequence[str]) -> List[str]:
        """See :meth:`PackageBackend.without_trace` (one dpkg-query for all of them)."""
        states = {n: self._seen[n] for n in names} if all(n in self._seen for n in names) else self._states(names)
        return [n for n in names if len(states[n][0]) < 2 or states[n][0][1] in ("n", " ")]

    def _select(self, names: Sequence[str], selection: str) -> None:
        self._seen = {}
        lines = "".join(f"{n} {selection}\n" for n in names)
        if lines:
            proc.run([*self._dpkg, "--set-selections"], input_bytes=lines.encode())

    def hold(self, names: Sequence[str]) -> None:
        """``dpkg --set-selections`` with ``hold``: what ``apt-mark hold`` does, and it works under a root."""
        self._select(names, "hold")

    def unhold(self, names: Sequence[str]) -> None:
        """Back to ``install`` selections."""
        self._select(names, "install")


class RpmBackend:
    """rpm on a Red Hat-family node or root; holds are dnf versionlock entries."""

    name = "rpm"

    def __init__(self, root: Path = Path("/"), dbpath: Optional[str] = None) -> None:
        self.root = root
        self._rpm = ["rpm"]
        if not is_live_root(root):
            self._rpm += ["--root", os.path.abspath(root)]  # rpm refuses a relative --root
        if dbpath:
            self._rpm += ["--dbpath", dbpath]

    def installed_version(self, name: str) -> Optional[str]:
        """See :meth:`PackageBackend.installed_version` (``[epoch:]version-release``)."""
        fmt = "%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\n"
        result = proc.run([*self._rpm, "-q", "--qf", fmt, name], check=False)
        lines = result.stdout.decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if result.returncode == 0 and lines else None

    def installed_versions(self, names: Sequence[str]) -> Dict[str, Optional[str]]:
        """See :meth:`PackageBackend.installed_versions` (one ``rpm -q`` each)."""
        return {name: self.installed_version(name) for name in names}

    def package_state(self, name: str) -> str:
        """See :meth:`PackageBackend.package_state`."""
        version = self.installed_version(name)
        return f"{version} (installed)" if version else "not installed"

    def compare_versions(self, a: str, b: str) -> int:
        """See :meth:`PackageBackend.compare_versions` (rpm's own ``rpm.vercmp``)."""
        a, b = _check_version(a), _check_version(b)
        out = proc.run(["rpm", "--eval", f'%{{lua: print(rpm.vercmp("{a}", "{b}"))}}']).stdout
        value = int(out.decode().strip() or "0")
        return (value > 0) - (value < 0)

    def provides(self, requirement: Requirement) -> bool:
        """``rpm -q --whatprovides NAME``, then the versions of the matching provides compared by rpm.

        rpm 4.18 does not accept ``'name >= version'`` in ``--whatprovides``, so the constraint is
        checked against each provider's ``PROVIDEVERSION`` (or its EVR for unversioned provides).
        """
        fmt = "@%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\n[%{PROVIDENAME}\t%{PROVIDEVERSION}\n]"
        result = proc.run([*self._rpm, "-q", "--whatprovides", requirement.name, "--qf", fmt], check=False)
        if result.returncode != 0:
            return False
        if not requirement.op or not requirement.version:
            return True
        _check_version(requirement.version)  # a malformed bound is refused even when no provide names it
        evr = ""
        for line in result.stdout.decode("utf-8", "replace").splitlines():
            if line.startswith("@"):
                evr = line[1:]
                continue
            name, _, version = line.partition("\t")
            if name != requirement.name:
                continue
            if satisfies(version or evr, requirement, self.compare_versions):
                return True
        return False

    def install(self, files: Sequence[Path], *, allow_downgrade: bool = False) -> None:
        """``rpm -U`` in one transaction.

        rpm only warns about a failed ``%post`` or ``%posttrans`` and exits 0 with the package
        installed; that is a failed install here too (the package did not finish setting up).

        :raises MaintainerScriptFailed: naming each scriptlet that failed; :raises CommandError: any other failure.
        """
        extra = ["--oldpackage"] if allow_downgrade else []
        argv = [*self._rpm, "-U", *extra, *(str(f) for f in files)]
        result = proc.run(argv, env_overrides=package_manager_env(), check=False)
        stderr = result.stderr.decode("utf-8", "replace")
        failures = rpm_script_failures(stderr)
        if failures:
            raise MaintainerScriptFailed(argv, result.returncode or 1, stderr, failures)
        if result.returncode != 0:
            raise CommandError(argv, result.returncode, stderr)

    def remove(self, names: Sequence[str], *, purge: bool = False) -> None:
        """``rpm -e`` in one transaction (rpm keeps no config-files state, so ``purge`` changes nothing)."""
        if names:
            proc.run([*self._rpm, "-e", *names], env_overrides=package_manager_env())

    def without_trace(self, names: Sequence[str]) -> List[str]:
        """See :meth:`PackageBackend.without_trace`: rpm forgets an erased package completely."""
        return list(names)

    def _lock_lines(self) -> Tuple[Path, List[str]]:
        path = rooted(self.root, VERSIONLOCK)
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        return path, text.splitlines()

    def hold(self, names: Sequence[str]) -> None:
        """Lock ``names`` at their installed versions with ``NAME-EPOCH:VERSION-RELEASE.*`` lines in dnf's versionlock list.

        Earlier lines for the same names (an older release) are replaced; other lines stay as they are.
        """
        path, lines = self._lock_lines()
        lines = [line for line in lines if _versionlock_name(line) not in names]
        for name in names:
            version = self.installed_version(name)
            if version is None:
                raise ToolError(f"cannot hold {name}: it is not installed")
            entry = f"{name}-{version if ':' in version else '0:' + version}.*"
            if entry not in lines:
                lines.append(entry)
        write_config(path, ("\n".join(lines) + "\n").encode())

    def unhold(self, names: Sequence[str]) -> None:
        """Drop the versionlock lines of ``names``; other lines stay byte-for-byte."""
        path, lines = self._lock_lines()
        if not path.is_file():
            return
        kept = [line for line in lines if _versionlock_name(line) not in names]
        if kept != lines:
            write_config(path, ("\n".join(kept) + "\n").encode() if kept else b"")


def _versionlock_name(line: str) -> str:
    """``nvidia-container-toolkit-0:1.17.8-1.*`` -> ``nvidia-container-toolkit``."""
    parts = line.strip().lstrip("!").rsplit("-", 2)
    return parts[0] if len(parts) == 3 else line.strip()


class FakeBackend:
    """An in-memory package manager for pure tests: records every call in ``calls``."""

    def __init__(
        self,
        installed: Optional[Dict[str, str]] = None,
        provided: Sequence[str] = (),
        name: str = "dpkg",
        fail_install: Optional[str] = None,
    ) -> None:
        self.name = name
        self.installed: Dict[str, str] = dict(installed or {})
        self.provided = set(provided)
        self.held: List[str] = []
        self.calls: List[Tuple[str, ...]] = []
        self.fail_install = fail_install  #: raise CommandError from install() with this text

    def installed_version(self, name: str) -> Optional[str]:
        """See :meth:`PackageBackend.installed_version`."""
        return self.installed.get(name)

    def installed_versions(self, names: Sequence[str]) -> Dict[str, Optional[str]]:
        """See :meth:`PackageBackend.installed_versions`."""
        return {name: self.installed.get(name) for name in names}

    def package_state(self, name: str) -> str:
        """See :meth:`PackageBackend.package_state`."""
        version = self.installed.get(name)
        return f"{version} (installed)" if version else "not installed"

    def compare_versions(self, a: str, b: str) -> int:
        """Compare dotted numbers only (enough for tests)."""
        key_a = [int(x) for x in re.findall(r"\d+", a)]
        key_b = [int(x) for x in re.findall(r"\d+", b)]
        return (key_a > key_b) - (key_a < key_b)

    def provides(self, requirement: Requirement) -> bool:
        """True for names given as ``provided`` (or installed)."""
        return requirement.name in self.provided or requirement.name in self.installed

    def install(self, files: Sequence[Path], *, allow_downgrade: bool = False) -> None:
        """Record the files; ``name_version_arch.ext`` names become installed entries."""
        self.calls.append(("install", *(str(f) for f in files)))
        if self.fail_install:
            raise CommandError([self.name, "--install"], 1, self.fail_install)
        for f in files:
            name, version = f.name.split("_")[:2]
            self.installed[name] = version

    def remove(self, names: Sequence[str], *, purge: bool = False) -> None:
        """Record and forget ``names``."""
        self.calls.append(("purge" if purge else "remove", *names))
        for name in names:
            self.installed.pop(name, None)

    def without_trace(self, names: Sequence[str]) -> List[str]:
        """Every name that is not installed."""
        return [n for n in names if n not in self.installed]

    def hold(self, names: Sequence[str]) -> None:
        """Record the hold."""
        self.calls.append(("hold", *names))
        self.held.extend(n for n in names if n not in self.held)

    def unhold(self, names: Sequence[str]) -> None:
        """Record the release."""
        self.calls.append(("unhold", *names))
        self.held = [n for n in self.held if n not in names]


def make_backend(package_format: Optional[str], root: Path, rpm_dbpath: Optional[str] = None) -> PackageBackend:
    """The backend for the node's package format.

    :raises ToolError: when the node has neither dpkg nor rpm.
    """
    if package_format == "deb":
        return DpkgBackend(root)
    if package_format == "rpm":
        return RpmBackend(root, rpm_dbpath)
    raise ToolError(f"found neither a dpkg nor an rpm database under {root}; this node cannot install packages")
