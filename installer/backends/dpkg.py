"""dpkg and dpkg-query: ``dpkg --root=DIR`` (admin directory ``DIR/var/lib/dpkg``), ``dpkg-query --admindir``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from installer import debversion
from installer.backends.base import check_version, package_manager_env
from installer.backends.scripts import MaintainerScriptFailed, dpkg_script_failures
from installer.preflight import satisfies
from installer.target import Requirement
from plumbing import proc
from plumbing.errors import CommandError
from plumbing.fsutil import is_live_root, rooted


class DpkgBackend:
    """dpkg and dpkg-query on a Debian-family node or root."""

    name = "dpkg"

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        scratch = not is_live_root(root)
        self._dpkg = ["dpkg", f"--root={os.path.abspath(root)}"] if scratch else ["dpkg"]
        if scratch and os.geteuid() != 0:
            # a root of the user's own (the state directory's check let this user through): dpkg
            # refuses non-root users unless told; a maintainer script still needs root to chroot
            self._dpkg.append("--force-not-root")
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
            result = proc.run(
                [*self._query, "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Version}\n", *names], check=False
            )
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
        return debversion.compare(check_version(a), check_version(b))

    def provides(self, requirement: Requirement) -> bool:
        """See :meth:`PackageBackend.provides`."""
        version = self.installed_version(requirement.name)
        return version is not None and satisfies(version, requirement, self.compare_versions)

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
            proc.run(
                [*self._dpkg, "--purge" if purge else "--remove", *names], env_overrides=package_manager_env()
            )

    def without_trace(self, names: Sequence[str]) -> List[str]:
        """See :meth:`PackageBackend.without_trace` (one dpkg-query for all of them)."""
        states = self._known(names)
        return [n for n in names if len(states[n][0]) < 2 or states[n][0][1] in ("n", " ")]

    def config_files(self, names: Sequence[str]) -> List[str]:
        """See :meth:`PackageBackend.config_files` (``${Conffiles}``: `` PATH MD5 [obsolete]`` lines)."""
        if not names:
            return []
        result = proc.run([*self._query, "-W", "-f=${Conffiles}\n", *names], check=False)
        lines = result.stdout.decode("utf-8", "replace").splitlines()
        return [line.split()[0] for line in lines if line.strip().startswith("/")]

    def _known(self, names: Sequence[str]) -> Dict[str, Tuple[str, str]]:
        """The states of ``names``: remembered from the last query when it asked for all of them."""
        if all(n in self._seen for n in names):
            return {n: self._seen[n] for n in names}
        return self._states(names)

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

    def held(self, names: Sequence[str]) -> List[str]:
        """See :meth:`PackageBackend.held`: the selection (first letter of ``db:Status-Abbrev``) is ``h``."""
        states = self._known(names)
        return [n for n in names if states[n][0][:1] == "h" and states[n][0][1:2] not in ("n", " ", "")]
