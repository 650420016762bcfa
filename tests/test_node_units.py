"""Pure parts of the node installer: node facts, requirements, install order, target choice, preflight, backends."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import pytest

from configure.changes import FileChange
from configure.journal import Journal, apply_changes
from configure.nodefacts import (
    detect_arch,
    detect_engines,
    detect_package_format,
    parse_os_release,
)
from installer import install as install_mod
from installer.backends.base import PackageBackend
from installer.backends.dpkg import DpkgBackend
from installer.backends.rpm import RpmBackend, _versionlock_name
from installer.env import NodeEnv
from installer.install import InstallFailed, InstallResult
from installer.plan import InstallOptions
from installer.preflight import check
from installer.target import (
    Requirement,
    StagedBundle,
    StagedPackage,
    StagedTarget,
    TargetMismatch,
    install_order,
    pick_target,
)
from plumbing.arch import normalize_arch
from tests.fakes import FakeBackend

# Conformance: every backend is a PackageBackend (the fake's check is in tests/fakes.py).
_dpkg: PackageBackend = DpkgBackend()
_rpm: PackageBackend = RpmBackend()


def pkg(
    name: str,
    version: str = "1.17.8-1",
    depends: Sequence[str] = (),
    breaks: Sequence[str] = (),
    size: int = 1000,
) -> StagedPackage:
    return StagedPackage(
        name,
        version,
        "amd64",
        Path(f"/staging/{name}_{version}_amd64.deb"),
        size,
        tuple(depends),
        tuple(Requirement.parse(b) for b in breaks),
    )


TOOLKIT_PACKAGES = (
    pkg(
        "nvidia-container-toolkit",
        depends=["nvidia-container-toolkit-base", "libnvidia-container-tools"],
        breaks=["nvidia-container-runtime (<= 3.5.0-1)", "nvidia-container-runtime-hook"],
    ),
    pkg("libnvidia-container-tools", depends=["libnvidia-container1", "libc6"]),
    pkg("nvidia-container-toolkit-base"),
    pkg("libnvidia-container1", depends=["libc6"]),
)
TARGET = StagedTarget("deb-amd64", "deb", "amd64", TOOLKIT_PACKAGES, (Requirement.parse("libc6 (>= 2.14)"),))


class TestNodeFacts:
    def test_os_release_quotes_comments_and_id_like(self) -> None:
        text = '# comment\nNAME="Rocky Linux"\nID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n'
        parsed = parse_os_release(text)
        assert (parsed.id, parsed.id_like, parsed.version_id) == (
            "rocky",
            ("rhel", "centos", "fedora"),
            "9.4",
        )

    @pytest.mark.parametrize(
        ("arch", "fmt", "expected"),
        [
            ("x86_64", "deb", "amd64"),
            ("amd64", "rpm", "x86_64"),
            ("aarch64", "deb", "arm64"),
            ("arm64", "rpm", "aarch64"),
            ("ppc64le", "deb", "ppc64el"),
            ("ppc64el", "rpm", "ppc64le"),
            ("riscv64", "deb", "riscv64"),
        ],
    )
    def test_arch_spelled_for_the_package_world(self, arch: str, fmt: str, expected: str) -> None:
        assert normalize_arch(arch, fmt) == expected

    def test_arch_falls_back_to_uname_when_rpm_cannot_answer(self) -> None:
        asked: List[Sequence[str]] = []

        def runner(argv: Sequence[str]) -> Optional[str]:
            asked.append(argv)
            return "aarch64\n" if argv[0] == "uname" else None

        assert detect_arch("rpm", runner) == "aarch64"
        assert detect_arch("deb", runner) == "arm64"
        assert asked[0] == ["rpm", "--eval", "%{_arch}"]

    def test_package_format_comes_from_the_database_under_the_root(self, tmp_path: Path) -> None:
        assert detect_package_format(tmp_path, lambda name: "/usr/bin/" + name) == (None, None)
        (tmp_path / "usr/lib/sysimage/rpm").mkdir(parents=True)
        assert detect_package_format(tmp_path, lambda name: None) == ("rpm", "/usr/lib/sysimage/rpm")
        (tmp_path / "var/lib/dpkg").mkdir(parents=True)
        (tmp_path / "var/lib/dpkg/status").write_text("")
        assert detect_package_format(tmp_path, lambda name: None) == ("deb", None)

    def test_engines_detected_by_config_or_binary(self, tmp_path: Path) -> None:
        assert detect_engines(tmp_path) == ()
        (tmp_path / "etc/crio/crio.conf.d").mkdir(parents=True)
        (tmp_path / "usr/bin").mkdir(parents=True)
        (tmp_path / "usr/bin/dockerd").write_text("")
        assert detect_engines(tmp_path) == ("docker", "crio")


class TestTarget:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("libc6 (>= 2.14)", Requirement("libc6", ">=", "2.14")),
            ("libcap2 (>= 1:2.10)", Requirement("libcap2", ">=", "1:2.10")),
            ("glibc >= 2.17", Requirement("glibc", ">=", "2.17")),
            ("libseccomp", Requirement("libseccomp")),
            ("foo < 2", Requirement("foo", "<<", "2")),
            ("libc.so.6()(64bit)", Requirement("libc.so.6()(64bit)")),
        ],
    )
    def test_requirement_parses_deb_and_rpm_spellings(self, text: str, expected: Requirement) -> None:
        assert Requirement.parse(text) == expected

    def test_install_order_follows_dependencies(self) -> None:
        assert [p.name for p in install_order(TOOLKIT_PACKAGES)] == [
            "libnvidia-container1",
            "libnvidia-container-tools",
            "nvidia-container-toolkit-base",
            "nvidia-container-toolkit",
        ]

    def test_no_matching_target_names_both_sides(self) -> None:
        bundle = StagedBundle("id", "F" * 40, "1.17.8", (TARGET,), Path("/staging"))
        with pytest.raises(TargetMismatch, match=r"the bundle has deb/amd64 but this node is rpm/aarch64"):
            pick_target(bundle, "rpm", "aarch64", ("rhel",))
        with pytest.raises(
            TargetMismatch,
            match=r"found neither a dpkg nor an rpm database on this node, and the bundle has deb/amd64",
        ):
            pick_target(bundle, None, "amd64", ())

    def test_distribution_specific_target_preferred(self) -> None:
        generic = StagedTarget("deb-amd64", "deb", "amd64", ())
        ubuntu = StagedTarget("deb-amd64-ubuntu", "deb", "amd64", (), distro="ubuntu")
        bundle = StagedBundle("id", "F" * 40, "1", (generic, ubuntu), Path("/s"))
        assert pick_target(bundle, "deb", "amd64", ("ubuntu", "debian")) is ubuntu
        assert pick_target(bundle, "deb", "amd64", ("debian",)) is generic


def _check(installed: dict, met: bool = True, free: int = 10**9, allow_downgrade: bool = False):  # type: ignore[no-untyped-def,type-arg]
    backend = FakeBackend()
    return check(
        TARGET,
        installed=installed,
        requirements_met=dict.fromkeys(TARGET.requirements, met),
        compare=backend.compare_versions,
        free_bytes=free,
        allow_downgrade=allow_downgrade,
    )


class TestStagedFromManifest:
    def _staged(self, breaks: Optional[Tuple[str, ...]]) -> StagedPackage:
        from installer.bundle import VerifiedBundle
        from installer.manifest import Manifest, PackageEntry, Provenance, TargetEntry
        from installer.source import staged_from_verified

        entry = PackageEntry(
            "nvidia-container-toolkit",
            "1.17.8-1",
            "amd64",
            "targets/deb-amd64/t.deb",
            1,
            "a" * 64,
            0,
            breaks=breaks,
        )
        target = TargetEntry(
            "deb", "amd64", "targets/deb-amd64", "1.17.8-1", Provenance("u", "F" * 40, None), (entry,)
        )
        manifest = Manifest("0", "t", "stable", "1.17.8", "u", "F" * 40, "F" * 40, (target,), ())
        staged = staged_from_verified(VerifiedBundle(Path("/staging"), manifest, "F" * 40))
        return staged.targets[0].packages[0]

    def test_breaks_stated_in_the_manifest_are_used_as_stated(self) -> None:
        assert self._staged(("nvidia-docker2 (<< 2.14.0)",)).breaks == (
            Requirement("nvidia-docker2", "<<", "2.14.0"),
        )
        assert self._staged(()).breaks == ()

    def test_a_manifest_without_breaks_falls_back_to_the_known_upstream_ones(self) -> None:
        from installer.source import KNOWN_BREAKS

        assert self._staged(None).breaks == KNOWN_BREAKS["nvidia-container-toolkit"]


class TestPreflight:
    def test_every_problem_reported_at_once(self) -> None:
        result = _check({"nvidia-container-toolkit": "1.18.0-1"}, met=False, free=10)
        assert len(result.problems) == 3
        assert "the node requirement libc6 (>= 2.14) is not installed" in result.problems
        assert (
            "nvidia-container-toolkit 1.18.0-1 is newer than the bundle's 1.17.8-1; pass --allow-downgrade to install it "
            "anyway" in result.problems
        )
        assert any(p.startswith("only 0.0 MiB free under /") for p in result.problems)

    def test_same_versions_mean_nothing_to_do(self) -> None:
        result = _check({p.name: "1.17.8-1" for p in TOOLKIT_PACKAGES})
        assert result.nothing_to_do and len(result.already) == 4 and result.to_install == []

    def test_upgrade_and_allowed_downgrade_are_planned(self) -> None:
        upgrade = _check({"libnvidia-container1": "1.14.0-1"})
        assert (
            len(upgrade.to_install) == 4
            and upgrade.change_lines(done=False)
            == ["would upgrade libnvidia-container1 from 1.14.0-1 to 1.17.8-1"]
            and upgrade.change_lines(done=True) == ["upgraded libnvidia-container1 from 1.14.0-1 to 1.17.8-1"]
        )
        result = _check({"nvidia-container-toolkit": "1.18.0-1"}, allow_downgrade=True)
        assert result.problems == [] and result.downgrades == [
            ("nvidia-container-toolkit", "1.18.0-1", "1.17.8-1")
        ]
        assert result.change_lines(done=True) == [
            "downgraded nvidia-container-toolkit from 1.18.0-1 to 1.17.8-1"
        ]

    def test_broken_legacy_package_is_planned_for_removal_and_new_one_kept(self) -> None:
        old = _check({"nvidia-container-runtime": "3.4.0-1", "nvidia-docker2": "2.14.0-1"})
        assert old.remove_first == [
            (
                "nvidia-container-runtime",
                "3.4.0-1",
                "nvidia-container-toolkit 1.17.8-1 breaks nvidia-container-runtime (<= 3.5.0-1)",
            )
        ]
        assert any(n.startswith("nvidia-docker2 2.14.0-1 is a deprecated package") for n in old.notes)
        new = _check({"nvidia-container-runtime": "3.14.0-1"})
        assert new.remove_first == [] and any("nvidia-container-runtime 3.14.0-1" in n for n in new.notes)


class TestBackends:
    @pytest.mark.parametrize(
        ("a", "b", "expected"),
        [
            ("1.17.8-1", "1.17.10-1", -1),
            ("1:2.10", "2.66", 1),
            ("1.14.0~rc.2-1", "1.14.0-1", -1),
            ("2.36-9", "2.36-9", 0),
        ],
    )
    def test_dpkg_compares_like_dpkg(self, a: str, b: str, expected: int) -> None:
        assert DpkgBackend().compare_versions(a, b) == expected

    @pytest.mark.parametrize(
        ("a", "b", "expected"),
        [("1.17.8-1", "1.17.10-1", -1), ("2.34-1", "2.17", 1), ("1.14.0~rc.2-1", "1.14.0-1", -1)],
    )
    def test_rpm_compares_like_rpm(self, a: str, b: str, expected: int) -> None:
        assert RpmBackend().compare_versions(a, b) == expected

    def test_version_strings_with_shell_or_lua_characters_are_refused(self) -> None:
        with pytest.raises(Exception, match="refusing the version string"):
            RpmBackend().compare_versions('1") os.exit(1) --', "1")

    def test_dpkg_commands_honour_the_root(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        seen: List[List[str]] = []

        class Done:
            returncode = 0
            stdout = b""

        monkeypatch.setattr("plumbing.proc.run", lambda argv, **kw: seen.append(list(argv)) or Done())
        backend = DpkgBackend(tmp_path)
        backend.install([Path("/s/a.deb")])
        backend.hold(["a"])
        backend.installed_version("a")
        assert seen[0] == ["dpkg", f"--root={tmp_path}", "--install", "/s/a.deb"]
        assert seen[1] == ["dpkg", f"--root={tmp_path}", "--set-selections"]
        assert seen[2][:2] == ["dpkg-query", f"--admindir={tmp_path}/var/lib/dpkg"]

    def test_versionlock_lines_name_their_package(self) -> None:
        assert _versionlock_name("nvidia-container-toolkit-0:1.17.8-1.*") == "nvidia-container-toolkit"
        assert _versionlock_name("libnvidia-container1-0:1.17.8-1.*") == "libnvidia-container1"


class TestOrchestration:
    def test_failed_install_names_the_state_of_every_package(self) -> None:
        backend = FakeBackend(
            installed={"libnvidia-container1": "1.17.7-1"}, fail_install="dpkg: error processing archive"
        )
        pre = _check({"libnvidia-container1": "1.17.7-1"})
        previous = {"libnvidia-container1": "1.17.7-1"}
        with pytest.raises(InstallFailed) as info:
            install_mod._install_packages(backend, pre, previous, InstallOptions())
        message = str(info.value)
        assert "dpkg failed" in message and "libnvidia-container1: 1.17.7-1 (installed)" in message
        assert "nvidia-container-toolkit: not installed" in message

    def test_engine_that_does_not_come_back_is_restored_and_restarted(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        config = tmp_path / "etc/containerd/config.toml"
        config.parent.mkdir(parents=True)
        config.write_bytes(b"version = 2\n")
        journal = Journal(tmp_path)
        apply_changes(
            "containerd", [FileChange(config, b"version = 2\n", b"version = 2\n# nvidia\n")], journal
        )

        class Broken:
            def __init__(self) -> None:
                self.calls: List[str] = []

            def restart(self, unit: str) -> None:
                self.calls.append("restart " + unit)

            def is_active(self, unit: str) -> bool:
                return len(self.calls) > 1  # down after our change, up after the restore

            def is_stopped(self, unit: str) -> bool:
                return False

        services = Broken()
        result = InstallResult("installed", "n", "t", "id", engines={"containerd": "registered"})
        options = InstallOptions(root=tmp_path)
        monkeypatch.setattr(install_mod, "_may_restart", lambda options: True)
        kept = install_mod.restart_engines(
            ["containerd"], options, journal, NodeEnv(services=services), result
        )
        assert kept == []  # the reverted engine is not recorded as changed
        assert config.read_bytes() == b"version = 2\n"
        assert services.calls == ["restart containerd", "restart containerd"]
        assert (
            "did not come back" in result.engines["containerd"]
            and "running again" in result.engines["containerd"]
        )
        assert result.failed_engines == ["containerd"]  # the CLI turns this into a non-zero exit
        assert "previous configuration was restored" in str(
            install_mod.EngineRestartFailed(result.failed_engines)
        )


def test_an_engine_the_admin_stopped_is_neither_restarted_nor_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_bytes(b"version = 2\n")
    journal = Journal(tmp_path)
    apply_changes("containerd", [FileChange(config, b"version = 2\n", b"version = 2\n# nvidia\n")], journal)

    class Stopped:
        def __init__(self) -> None:
            self.calls: List[str] = []

        def restart(self, unit: str) -> None:
            self.calls.append("restart " + unit)

        def is_active(self, unit: str) -> bool:
            return False

        def is_stopped(self, unit: str) -> bool:
            return True

    services = Stopped()
    result = InstallResult("installed", "n", "t", "id", engines={"containerd": "registered"})
    monkeypatch.setattr(install_mod, "_may_restart", lambda options: True)
    kept = install_mod.restart_engines(
        ["containerd"], InstallOptions(root=tmp_path), journal, NodeEnv(services=services), result
    )
    assert kept == ["containerd"] and services.calls == [] and result.failed_engines == []
    assert config.read_bytes() == b"version = 2\n# nvidia\n"  # the change stays for its next start
    assert "it was stopped" in result.engines["containerd"]


def test_systemd_restart_clears_the_start_limit_first_and_a_restart_that_hangs_is_not_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from installer import env as env_mod
    from plumbing.errors import CommandError

    calls: List[Tuple[str, ...]] = []

    def run(argv: Sequence[str], **kwargs: object) -> None:
        calls.append((*argv, str(kwargs.get("timeout"))))
        if argv[1] == "restart":
            raise CommandError(argv, -1, f"timed out after {kwargs.get('timeout')} s")

    monkeypatch.setattr(env_mod.proc, "run", run)
    env_mod.Systemd().restart("containerd")  # the caller's is_active check sees it did not come back
    assert calls == [
        ("systemctl", "reset-failed", "containerd", "30"),
        ("systemctl", "restart", "containerd", "300.0"),
    ]


def test_package_manager_runs_get_the_sbin_directories_dpkg_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    from installer.backends.base import package_manager_env

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert package_manager_env()["PATH"] == "/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
    monkeypatch.setenv("PATH", "/sbin:/usr/bin")
    assert package_manager_env()["PATH"] == "/sbin:/usr/bin:/usr/local/sbin:/usr/sbin"
