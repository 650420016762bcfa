"""mirror.sync.resolve on NVIDIA's real Packages and on small synthetic repositories."""

from __future__ import annotations

import pytest

from mirror.errors import UnresolvableDependency
from mirror.index.apt import parse_packages, parse_relations
from mirror.model import Package, PackageFormat, Relation
from mirror.release.selectors import VersionSelector
from mirror.release.versions import satisfies, sort_key
from mirror.sync.resolve import resolve
from plumbing.errors import ExitCode
from tests.gpgkeys import REAL

DEB, RPM = PackageFormat.DEB, PackageFormat.RPM
REAL_PACKAGES = parse_packages((REAL / "stable/deb/amd64/Packages").read_text())
FOUR = [
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
]
STABLE_VERSIONS = sorted(
    {p.version for p in REAL_PACKAGES if p.name == "nvidia-container-toolkit"}, key=sort_key(DEB)
)


def pkg(
    name: str,
    version: str,
    depends: str = "",
    fmt: PackageFormat = DEB,
    breaks: str = "",
    arch: str = "amd64",
) -> Package:
    return Package(
        format=fmt,
        name=name,
        version=version,
        arch=arch,
        filename=f"./{name}_{version}_{arch}.deb",
        size=1,
        depends=parse_relations(depends) if depends else (),
        breaks=parse_relations(breaks) if breaks else (),
    )


def sel(text: str) -> VersionSelector:
    return VersionSelector.parse(text)


def test_real_packages_have_28_stable_versions() -> None:
    assert len(STABLE_VERSIONS) == 28
    assert STABLE_VERSIONS[0] == "1.14.0-1" and STABLE_VERSIONS[-1] == "1.20.1-1"


@pytest.mark.parametrize("version", STABLE_VERSIONS)
def test_every_stable_version_resolves_to_the_four_packages_at_that_version(version: str) -> None:
    result = resolve(REAL_PACKAGES, sel(version), DEB)
    assert [(p.name, p.version) for p in result.packages] == [(name, version) for name in FOUR]
    assert result.toolkit_version == version


def test_1_17_8_pins_tools_and_library_although_newer_satisfy_the_constraints() -> None:
    toolkit = next(p for p in REAL_PACKAGES if p.key == ("nvidia-container-toolkit", "1.17.8-1", "amd64"))
    tools_constraint = next(
        rel for group in toolkit.depends for rel in group if rel.name == "libnvidia-container-tools"
    )
    # A plain newest-first resolver (and apt) would take 1.17.9-1 here: prove the trap is real.
    assert satisfies("1.17.9-1", tools_constraint.op, tools_constraint.version, DEB)
    result = resolve(REAL_PACKAGES, sel("1.17.8"), DEB)
    assert {p.name: p.version for p in result.packages} == dict.fromkeys(FOUR, "1.17.8-1")


def test_latest_is_1_20_1() -> None:
    assert resolve(REAL_PACKAGES, sel("latest"), DEB).toolkit_version == "1.20.1-1"


def test_node_requirements_and_breaks_are_recorded_not_errors() -> None:
    result = resolve(REAL_PACKAGES, sel("1.14.0"), DEB)
    needs = {(r.package, str(r)) for r in result.node_requirements}
    assert ("nvidia-container-toolkit", "libseccomp2") in needs
    assert ("libnvidia-container-tools", "libc6 (>= 2.8)") in needs
    assert ("libnvidia-container1", "libc6 (>= 2.27)") in needs
    assert ("libnvidia-container-tools", "libcap2 (>= 1:2.10)") in needs
    breaks = {str(b) for b in result.breaks}
    assert "nvidia-container-toolkit Breaks nvidia-container-runtime (<= 3.5.0-1)" in breaks
    assert "nvidia-container-toolkit-base Breaks nvidia-container-runtime-hook" in breaks
    # base also Breaks nvidia-container-toolkit (<= 1.10.0-1), which is in the set: not an external break
    assert not any(b.relation.name == "nvidia-container-toolkit" for b in result.breaks)


def test_range_and_wildcard_selectors_on_real_packages() -> None:
    assert resolve(REAL_PACKAGES, sel(">=1.17,<1.18"), DEB).toolkit_version == "1.17.9-1"
    assert resolve(REAL_PACKAGES, sel("1.16.*"), DEB).toolkit_version == "1.16.2-1"


def test_unknown_version_names_the_selector() -> None:
    with pytest.raises(
        UnresolvableDependency, match=r"nvidia-container-toolkit 1\.99\.0.*no such version"
    ) as info:
        resolve(REAL_PACKAGES, sel("1.99.0"), DEB)
    assert info.value.exit_code is ExitCode.UNRESOLVABLE


def test_missing_exact_dependency_names_package_and_constraint() -> None:
    packages = [p for p in REAL_PACKAGES if p.key != ("nvidia-container-toolkit-base", "1.17.8-1", "amd64")]
    with pytest.raises(UnresolvableDependency) as info:
        resolve(packages, sel("1.17.8"), DEB)
    assert info.value.package == "nvidia-container-toolkit"
    assert info.value.constraint == "nvidia-container-toolkit-base (= 1.17.8-1)"
    assert str(info.value) == (
        "cannot satisfy nvidia-container-toolkit-base (= 1.17.8-1) required by nvidia-container-toolkit: "
        "no matching package in the repository"
    )


def test_contradictory_constraints_are_unresolvable() -> None:
    packages = [
        pkg("nvidia-container-toolkit", "1.0-1", "a (>= 2), b"),
        pkg("a", "1-1"),
        pkg("b", "1-1", "a (<< 2)"),
        pkg("a", "2-1"),
    ]
    with pytest.raises(UnresolvableDependency, match=r"a \(<< 2\) required by b"):
        resolve(packages, sel("latest"), DEB)


def test_backtracks_from_the_preferred_candidate_when_it_clashes() -> None:
    # The train prefers tools 1.0-1, but lib (= 2) forces tools 2.0-1.
    packages = [
        pkg("nvidia-container-toolkit", "1.0-1", "tools (>= 1.0-1), lib (= 2)"),
        pkg("tools", "1.0-1", "lib (= 1)"),
        pkg("tools", "2.0-1", "lib (>= 2)"),
        pkg("lib", "1"),
        pkg("lib", "2"),
    ]
    result = resolve(packages, sel("latest"), DEB)
    assert {p.name: p.version for p in result.packages} == {
        "nvidia-container-toolkit": "1.0-1",
        "tools": "2.0-1",
        "lib": "2",
    }


def test_alternatives_take_the_first_available_and_absent_ones_go_to_the_node() -> None:
    packages = [
        pkg("nvidia-container-toolkit", "1.0-1", "missing-a | present (>= 2), libc6 | musl"),
        pkg("present", "1"),
        pkg("present", "3"),
    ]
    result = resolve(packages, sel("latest"), DEB)
    assert [(p.name, p.version) for p in result.packages] == [
        ("present", "3"),
        ("nvidia-container-toolkit", "1.0-1"),
    ]
    assert [str(r) for r in result.node_requirements] == ["libc6 | musl"]


def test_breaks_inside_the_set_are_avoided() -> None:
    packages = [
        pkg("nvidia-container-toolkit", "1.0-1", "helper"),
        pkg("helper", "2", breaks="nvidia-container-toolkit (<= 1.0-1)"),
        pkg("helper", "1"),
    ]
    result = resolve(packages, sel("latest"), DEB)
    assert {p.name: p.version for p in result.packages}["helper"] == "1"


def _experimental() -> list[Package]:
    out = []
    for version in ["1.19.0-1", "1.19.1-1", "1.20.0~rc.1-1", "1.18.0~rc.6-1"]:
        out += [
            pkg(
                "nvidia-container-toolkit",
                version,
                f"nvidia-container-toolkit-base (= {version}), libnvidia-container-tools (>= {version})",
            ),
            pkg("nvidia-container-toolkit-base", version),
            pkg(
                "libnvidia-container-tools",
                version,
                f"libnvidia-container1 (>= {version.split('-')[0]}), libc6 (>= 2.14)",
            ),
            pkg("libnvidia-container1", version, "libc6 (>= 2.27)"),
        ]
    return out


def test_latest_on_experimental_picks_the_release_candidate_of_the_next_version() -> None:
    result = resolve(_experimental(), sel("latest"), DEB)
    assert result.toolkit_version == "1.20.0~rc.1-1"
    assert {p.version for p in result.packages} == {"1.20.0~rc.1-1"}


def test_older_release_candidate_pins_its_train_on_experimental() -> None:
    result = resolve(_experimental(), sel("1.18.0~rc.6"), DEB)
    assert {p.version for p in result.packages} == {"1.18.0~rc.6-1"}


def rpm_pkg(name: str, version: str, requires: list[Relation], arch: str = "x86_64") -> Package:
    return Package(
        RPM, name, version, arch, f"{name}-{version}.{arch}.rpm", 1, depends=tuple((r,) for r in requires)
    )


def test_rpm_train_pinning_with_release_less_constraints() -> None:
    packages = []
    for version in ["1.17.8", "1.17.9", "1.18.0~rc.1", "1.18.0"]:
        full = f"{version}-1"
        packages += [
            rpm_pkg(
                "nvidia-container-toolkit",
                full,
                [
                    Relation("nvidia-container-toolkit-base", "=", full),
                    Relation("libnvidia-container-tools", ">=", version),
                ],
            ),
            rpm_pkg("nvidia-container-toolkit-base", full, [Relation("/bin/sh", raw="/bin/sh")]),
            rpm_pkg(
                "libnvidia-container-tools", full, [Relation("libnvidia-container1(x86-64)", ">=", version)]
            ),
            rpm_pkg("libnvidia-container1", full, [Relation("glibc", ">=", "2.17")]),
        ]
    # libnvidia-container1 is required through its arch-qualified provide
    packages = [
        Package(
            p.format,
            p.name,
            p.version,
            p.arch,
            p.filename,
            p.size,
            depends=p.depends,
            provides=(Relation("libnvidia-container1(x86-64)", "=", p.version),),
        )
        if p.name == "libnvidia-container1"
        else p
        for p in packages
    ]
    result = resolve(packages, sel("1.17.8"), RPM)
    assert [(p.name, p.version) for p in result.packages] == [(name, "1.17.8-1") for name in FOUR]
    assert {str(r) for r in result.node_requirements} == {"/bin/sh", "glibc (>= 2.17)"}
    assert resolve(packages, sel("latest"), RPM).toolkit_version == "1.18.0-1"
