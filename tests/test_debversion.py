"""The in-process Debian version comparison agrees with the real ``dpkg --compare-versions``."""

from __future__ import annotations

import random
import subprocess

import pytest

from installer.debversion import compare, satisfied
from plumbing.errors import ToolError

#: pairs where dpkg's rules bite: tildes, epochs, revisions, leading zeros, letters vs symbols, the
#: toolkit's own versions and the floors preflight checks them against
TRICKY = [
    ("1.0~rc1", "1.0"),
    ("1.0~~", "1.0~"),
    ("1.0~", "1.0"),
    ("1.0", "1.0-0"),
    ("1.0-0", "1.0-00"),
    ("1:1.0", "2.0"),
    ("0:1.0", "1.0"),
    ("1.0a", "1.0+"),
    ("1.0+", "1.0."),
    ("1.0.", "1.0-"),
    ("1.001", "1.1"),
    ("1.10", "1.9"),
    ("2.36-9+deb12u14", "2.14"),
    ("1:2.66-4+deb12u3+b1", "1:2.10"),
    ("2.5.4-1+deb12u1", "0.0.0~20120605"),
    ("1.20.0-1", "1.20.0-1~"),
    ("1.17.8-1", "1.20.0-1"),
    ("1.0-1-2", "1.0-1"),
    ("a", "b"),
    ("1.0a1", "1.0a"),
    ("1.0", "1.0a"),
    ("9", "10"),
    ("1.0+dfsg", "1.0"),
]


def dpkg_compare(a: str, b: str) -> int:
    def holds(op: str) -> bool:
        return subprocess.run(["dpkg", "--compare-versions", a, op, b], check=False).returncode == 0

    return 0 if holds("eq") else (-1 if holds("lt") else 1)


def random_versions(count: int) -> list[tuple[str, str]]:
    rng = random.Random(20261201)
    parts = ["0", "1", "01", "10", "2", "a", "b", "z", "~", "+", ".", "~rc", "deb12u", "ubuntu"]

    def one() -> str:
        epoch = rng.choice(["", "", "1:", "2:"])
        upstream = rng.choice("0123456789") + "".join(rng.choice(parts) for _ in range(rng.randint(0, 4)))
        revision = rng.choice(["", "-1", "-1~", "-0", "-2+b1", "-1.1"])
        return f"{epoch}{upstream}{revision}"

    return [(one(), one()) for _ in range(count)]


@pytest.mark.parametrize("pairs", [TRICKY, random_versions(250)], ids=["tricky", "random"])
def test_comparison_agrees_with_the_real_dpkg(pairs: list[tuple[str, str]]) -> None:
    disagree = [
        (a, b, compare(a, b), dpkg_compare(a, b)) for a, b in pairs if compare(a, b) != dpkg_compare(a, b)
    ]
    assert disagree == []
    assert all(compare(b, a) == -compare(a, b) for a, b in pairs)


def test_relations_read_like_debian_dependencies() -> None:
    assert satisfied("2.36-9+deb12u14", ">=", "2.14")
    assert satisfied("1.0~rc1", "<<", "1.0") and not satisfied("1.0", "<<", "1.0")
    assert (
        satisfied("0:1.0", "=", "1.0")
        and satisfied("1.0-0", "<=", "1.0")
        and satisfied("2", ">>", "1:0") is False
    )


@pytest.mark.parametrize("bad", ["x:1.0", ":1.0", "1:", "-1"])
def test_a_version_dpkg_would_refuse_is_refused_with_a_sentence(bad: str) -> None:
    with pytest.raises(ToolError, match="version"):
        compare(bad, "1.0")
