"""Maintainer scripts that failed, read from dpkg's and rpm's own messages.

rpm only *warns* when a ``%post``/``%posttrans`` fails and still exits 0, so its warnings are read too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from plumbing.errors import CommandError


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

    def __init__(
        self, argv: Sequence[str], returncode: int, stderr: str, failures: Sequence[ScriptFailure]
    ) -> None:
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
_RPM_FAILURE = re.compile(
    r"^(?:warning|error): %(\w+)\((\S+)\) scriptlet failed, (exit status \d+|signal \d+)"
)


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
