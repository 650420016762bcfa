"""rpm: ``rpm --root DIR --dbpath PATH``; holds are lines in dnf's versionlock list."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from configure.changes import write_config
from installer.backends.base import check_version, package_manager_env
from installer.backends.scripts import MaintainerScriptFailed, rpm_script_failures
from installer.preflight import satisfies
from installer.target import Requirement
from plumbing import proc
from plumbing.errors import CommandError, ToolError
from plumbing.fsutil import is_live_root, rooted

VERSIONLOCK = "/etc/dnf/plugins/versionlock.list"


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
        a, b = check_version(a), check_version(b)
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
        check_version(requirement.version)  # a malformed bound is refused even when no provide names it
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
        """``rpm -e`` in one transaction; rpm keeps no config-files state, so ``purge`` changes nothing here.

        rpm deletes the packages' %config files, but keeps one edited since the install as ``FILE.rpmsave``
        (:mod:`installer.purge` deletes those copies for ``uninstall --purge``).
        """
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

    def config_files(self, names: Sequence[str]) -> List[str]:
        """See :meth:`PackageBackend.config_files` (``rpm -qc``)."""
        if not names:
            return []
        result = proc.run([*self._rpm, "-qc", *names], check=False)
        return [
            line for line in result.stdout.decode("utf-8", "replace").splitlines() if line.startswith("/")
        ]

    def held(self, names: Sequence[str]) -> List[str]:
        """See :meth:`PackageBackend.held`: a line of dnf's versionlock list names it (``!`` lines exclude, not hold)."""
        locked = {
            _versionlock_name(line) for line in self._lock_lines()[1] if not line.strip().startswith("!")
        }
        return [n for n in names if n in locked]


def _versionlock_name(line: str) -> str:
    """``nvidia-container-toolkit-0:1.17.8-1.*`` -> ``nvidia-container-toolkit``."""
    parts = line.strip().lstrip("!").rsplit("-", 2)
    return parts[0] if len(parts) == 3 else line.strip()
