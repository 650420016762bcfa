"""mirror.release.versions: dpkg order via python-debian, rpm order via our rpmvercmp port."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from mirror.model import PackageFormat
from mirror.release.versions import (
    compare,
    rpm_evr_compare,
    rpmvercmp,
    satisfies,
    sort_key,
    split_evr,
    upstream_version,
)

DEB, RPM = PackageFormat.DEB, PackageFormat.RPM

# rpm's own table, tests/rpmvercmp.at (rpm 4.15+, with tilde and caret).
RPMVERCMP_TABLE = [
    ("1.0", "1.0", 0),
    ("1.0", "2.0", -1),
    ("2.0", "1.0", 1),
    ("2.0.1", "2.0.1", 0),
    ("2.0", "2.0.1", -1),
    ("2.0.1", "2.0", 1),
    ("2.0.1a", "2.0.1a", 0),
    ("2.0.1a", "2.0.1", 1),
    ("2.0.1", "2.0.1a", -1),
    ("5.5p1", "5.5p1", 0),
    ("5.5p1", "5.5p2", -1),
    ("5.5p2", "5.5p1", 1),
    ("5.5p10", "5.5p10", 0),
    ("5.5p1", "5.5p10", -1),
    ("5.5p10", "5.5p1", 1),
    ("10xyz", "10.1xyz", -1),
    ("10.1xyz", "10xyz", 1),
    ("xyz10", "xyz10", 0),
    ("xyz10", "xyz10.1", -1),
    ("xyz10.1", "xyz10", 1),
    ("xyz.4", "xyz.4", 0),
    ("xyz.4", "8", -1),
    ("8", "xyz.4", 1),
    ("xyz.4", "2", -1),
    ("2", "xyz.4", 1),
    ("5.5p2", "5.6p1", -1),
    ("5.6p1", "5.5p2", 1),
    ("5.6p1", "6.5p1", -1),
    ("6.5p1", "5.6p1", 1),
    ("6.0.rc1", "6.0", 1),
    ("6.0", "6.0.rc1", -1),
    ("10b2", "10a1", 1),
    ("10a2", "10b2", -1),
    ("1.0aa", "1.0aa", 0),
    ("1.0a", "1.0aa", -1),
    ("1.0aa", "1.0a", 1),
    ("10.0001", "10.0001", 0),
    ("10.0001", "10.1", 0),
    ("10.1", "10.0001", 0),
    ("10.0001", "10.0039", -1),
    ("10.0039", "10.0001", 1),
    ("4.999.9", "5.0", -1),
    ("5.0", "4.999.9", 1),
    ("20101121", "20101121", 0),
    ("20101121", "20101122", -1),
    ("20101122", "20101121", 1),
    ("2_0", "2_0", 0),
    ("2.0", "2_0", 0),
    ("2_0", "2.0", 0),
    ("a", "a", 0),
    ("a+", "a+", 0),
    ("a+", "a_", 0),
    ("a_", "a+", 0),
    ("+a", "+a", 0),
    ("+a", "_a", 0),
    ("_a", "+a", 0),
    ("+_", "+_", 0),
    ("_+", "+_", 0),
    ("_+", "_", 0),
    ("+", "_", 0),
    ("_", "+", 0),
    ("1.0~rc1", "1.0~rc1", 0),
    ("1.0~rc1", "1.0", -1),
    ("1.0", "1.0~rc1", 1),
    ("1.0~rc1", "1.0~rc2", -1),
    ("1.0~rc2", "1.0~rc1", 1),
    ("1.0~rc1~git123", "1.0~rc1~git123", 0),
    ("1.0~rc1~git123", "1.0~rc1", -1),
    ("1.0~rc1", "1.0~rc1~git123", 1),
    ("1.0^", "1.0^", 0),
    ("1.0^", "1.0", 1),
    ("1.0", "1.0^", -1),
    ("1.0^git1", "1.0^git1", 0),
    ("1.0^git1", "1.0", 1),
    ("1.0", "1.0^git1", -1),
    ("1.0^git1", "1.0^git2", -1),
    ("1.0^git2", "1.0^git1", 1),
    ("1.0^git1", "1.01", -1),
    ("1.01", "1.0^git1", 1),
    ("1.0^20160101", "1.0^20160101", 0),
    ("1.0^20160101", "1.0.1", -1),
    ("1.0.1", "1.0^20160101", 1),
    ("1.0^20160101^git1", "1.0^20160101^git1", 0),
    ("1.0^20160102", "1.0^20160101^git1", 1),
    ("1.0^20160101^git1", "1.0^20160102", -1),
    ("1.0~rc1^git1", "1.0~rc1^git1", 0),
    ("1.0~rc1^git1", "1.0~rc1", 1),
    ("1.0~rc1", "1.0~rc1^git1", -1),
    ("1.0^git1~pre", "1.0^git1~pre", 0),
    ("1.0^git1", "1.0^git1~pre", 1),
    ("1.0^git1~pre", "1.0^git1", -1),
    # NVIDIA's own shapes
    ("1.15.0~rc.1", "1.15.0", -1),
    ("1.20.0~rc.1", "1.19.1", 1),
    ("1.0.0", "1.0.0.1.rc.1", -1),
]


@pytest.mark.parametrize(("a", "b", "expected"), RPMVERCMP_TABLE)
def test_rpmvercmp_matches_rpms_own_table(a: str, b: str, expected: int) -> None:
    assert rpmvercmp(a, b) == expected


@pytest.mark.skipif(shutil.which("rpm") is None, reason="rpm is installed by make test")
def test_rpmvercmp_agrees_with_the_real_rpm_binary() -> None:
    pairs = ",".join(f'{{"{a}","{b}"}}' for a, b, _ in RPMVERCMP_TABLE)
    script = f"%{{lua: for _, p in ipairs({{{pairs}}}) do print(rpm.vercmp(p[1], p[2]) .. '\\n') end}}"
    out = subprocess.run(["rpm", "--eval", script], check=True, capture_output=True, text=True).stdout.split()
    assert [int(x) for x in out] == [rpmvercmp(a, b) for a, b, _ in RPMVERCMP_TABLE]


def test_dpkg_order_of_nvidia_versions() -> None:
    ordered = [
        "1.14.0~rc.2-1",
        "1.14.0-1",
        "1.15.0~rc.1-1",
        "1.15.0-1",
        "1.17.8-1",
        "1.20.0~rc.1-1",
        "1.20.0-1",
        "1.20.1-1",
    ]
    assert sorted(reversed(ordered), key=sort_key(DEB)) == ordered


def test_rpm_evr_compares_epoch_first_then_version_then_release() -> None:
    assert rpm_evr_compare("1:1.0-1", "2.0-1") == 1
    assert rpm_evr_compare("1.0-2", "1.0-10") == -1
    assert rpm_evr_compare("1.0-1", "1.0-1") == 0
    assert rpm_evr_compare("0:1.0-1", "1.0-1") == 0
    assert sorted(["1.20.0-1", "1.20.0~rc.1-1", "1.19.1-1"], key=sort_key(RPM)) == [
        "1.19.1-1",
        "1.20.0~rc.1-1",
        "1.20.0-1",
    ]


SATISFIES = [
    # deb: dpkg semantics; a bound without revision sorts below any revision of that version
    ("1.17.8-1", ">=", "1.17.8", DEB, True),
    ("1.17.8-1", "=", "1.17.8-1", DEB, True),
    ("1.17.8-1", "=", "1.17.8", DEB, False),
    ("1.17.8-1", "<<", "2.0.0", DEB, True),
    ("2.0.0-1", "<<", "2.0.0", DEB, False),
    ("1.20.0~rc.1-1", ">=", "1.20.0", DEB, False),
    ("1:2.66-4", ">=", "1:2.10", DEB, True),
    ("2.66-4", ">=", "1:2.10", DEB, False),
    ("3.14.0-1", "<=", "3.5.0-1", DEB, False),
    ("1.17.8-1", ">>", "1.17.8", DEB, True),
    ("1.0-1", None, None, DEB, True),
    # rpm: a bound without release compares the version only
    ("1.17.8-1", "=", "1.17.8", RPM, True),
    ("1.17.8-1", "<=", "1.17.8", RPM, True),
    ("1.17.8-1", ">>", "1.17.8", RPM, False),
    ("1.17.8-1", ">=", "1.17.8-2", RPM, False),
    ("1.17.9-1", ">>", "1.17.8-1", RPM, True),
    ("1.15.0~rc.1-1", "<<", "1.15.0", RPM, True),
]


@pytest.mark.parametrize(("version", "op", "bound", "fmt", "expected"), SATISFIES)
def test_satisfies(
    version: str, op: str | None, bound: str | None, fmt: PackageFormat, expected: bool
) -> None:
    assert satisfies(version, op, bound, fmt) is expected


def test_unknown_operator_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown version operator"):
        satisfies("1", "~=", "1", DEB)


def test_split_and_upstream_version() -> None:
    assert split_evr("2:1.0-3") == (2, "1.0", "3")
    assert split_evr("1.0") == (0, "1.0", None)
    assert upstream_version("1.17.8-1") == "1.17.8"
    assert upstream_version("1:2.10") == "2.10"
    assert compare("1.17.8-1", "1.17.8-1", DEB) == 0
