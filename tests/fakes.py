"""Test doubles for the pure unit tests: an in-memory package manager and a scripted fetcher.

They live with the tests so nothing fake ships in the node zipapp or in the installed package, and
nothing fake is built when a product module is imported. The conformance checks below are read by
mypy only (``TYPE_CHECKING``), like Go's ``var _ Interface = (*T)(nil)``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from installer.target import Requirement
from plumbing.errors import CommandError

if TYPE_CHECKING:
    from installer.backends.base import PackageBackend
    from mirror.index.repo import Fetcher


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
        self.holds: List[str] = []
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
        self.holds.extend(n for n in names if n not in self.holds)

    def unhold(self, names: Sequence[str]) -> None:
        """Record the release."""
        self.calls.append(("unhold", *names))
        self.holds = [n for n in self.holds if n not in names]

    def config_files(self, names: Sequence[str]) -> List[str]:
        """None: the fake packages have no configuration files."""
        return []

    def held(self, names: Sequence[str]) -> List[str]:
        """Those of ``names`` held and installed."""
        return [n for n in names if n in self.holds and n in self.installed]


class FakeFetcher:
    """Scripted responses for tests, in the style of aptly's ``FakeDownloader``.

    ``expect(url, body)`` or ``expect_error(url, error)``; any other URL raises ``AssertionError``
    and :meth:`assert_all_used` confirms every scripted URL was requested.
    """

    def __init__(self) -> None:
        """Start with no scripted responses."""
        self._responses: dict[str, bytes | Exception] = {}
        self.requested: list[str] = []

    def expect(self, url: str, body: bytes) -> FakeFetcher:
        """Answer ``url`` with ``body``; returns self for chaining."""
        self._responses[url] = body
        return self

    def expect_error(self, url: str, error: Exception) -> FakeFetcher:
        """Raise ``error`` when ``url`` is requested."""
        self._responses[url] = error
        return self

    def get(self, url: str) -> bytes:
        """Return the scripted body or raise the scripted error."""
        if url not in self._responses:
            raise AssertionError(f"unexpected request for {url}")
        self.requested.append(url)
        response = self._responses[url]
        if isinstance(response, Exception):
            raise response
        return response

    def assert_all_used(self) -> None:
        """Fail when a scripted URL was never requested."""
        unused = sorted(set(self._responses) - set(self.requested))
        if unused:
            raise AssertionError(f"scripted URLs never requested: {', '.join(unused)}")


if TYPE_CHECKING:
    _backend: PackageBackend = FakeBackend()
    _fetcher: Fetcher = FakeFetcher()
