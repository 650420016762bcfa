"""mirror.release.selectors: the --version forms and their errors."""

from __future__ import annotations

import pytest

from mirror.errors import SelectorError
from mirror.model import PackageFormat
from mirror.release.selectors import VersionSelector
from plumbing.errors import ExitCode

DEB, RPM = PackageFormat.DEB, PackageFormat.RPM
STABLE = [f"1.17.{n}-1" for n in range(10)] + [
    "1.18.0-1",
    "1.18.0~rc.1-1",
    "1.20.1-1",
    "1.20.0-1",
    "1.20.0~rc.1-1",
]

CASES = [
    ("latest", "latest", "1.20.1-1"),
    (" 1.17.8 ", "upstream", "1.17.8-1"),
    ("1.17.8-1", "exact", "1.17.8-1"),
    ("1.17.*", "wildcard", "1.17.9-1"),
    ("1.18.*", "wildcard", "1.18.0-1"),
    (">=1.17,<1.18", "range", "1.17.9-1"),
    (">= 1.17.2, <= 1.17.4", "range", "1.17.4-1"),
    ("<1.18", "range", "1.17.9-1"),
    ("==1.18.0~rc.1", "range", "1.18.0~rc.1-1"),
    ("1.99", "upstream", None),
]


@pytest.mark.parametrize(("text", "kind", "chosen"), CASES)
def test_selector_forms_choose_the_newest_match(text: str, kind: str, chosen: str | None) -> None:
    selector = VersionSelector.parse(text)
    assert selector.kind == kind
    assert selector.choose(STABLE, DEB) == chosen


def test_rpm_upstream_selector_matches_any_release() -> None:
    assert VersionSelector.parse("1.17.8").choose(["1.17.8-1", "1.17.8-2", "1.17.9-1"], RPM) == "1.17.8-2"


def test_latest_prefers_a_release_candidate_of_a_newer_version() -> None:
    assert VersionSelector.parse("latest").choose(["1.19.1-1", "1.20.0~rc.1-1"], DEB) == "1.20.0~rc.1-1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "it is empty"),
        ("newest", "use latest, all, a version"),
        ("v1.17.8", "use latest, all, a version"),
        ("1.17.8 rc1", "use latest, all, a version"),
        ("*", "a wildcard must look like 1.17.*"),
        ("1.*.*", "a wildcard must look like 1.17.*"),
        (">=1.17,,<1.18", "'' is not a comparison"),
        (">=abc", "'>=abc' is not a comparison"),
        ("=>1.17", "is not a comparison"),
    ],
)
def test_junk_selector_is_a_usage_error_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message) as info:
        VersionSelector.parse(text)
    assert info.value.exit_code is ExitCode.USAGE
    assert str(info.value).startswith(f"invalid version selector {text!r}")
