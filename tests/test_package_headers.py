"""Each package's own header agrees with the signed index entry it was fetched for, or it goes no further.

The tampered upstream (:func:`tests.upstream.tamper.swap_package`) serves, under the 1.17.8 name
of nvidia-container-toolkit, the 1.18.0 package, with its index entry's digest rewritten and
the index re-signed by the trusted key: every signature and digest checks out, only the package's
own header tells. ``mirror sync`` refuses it; a mirror an older gpu-airgap synced from such an
upstream is refused by ``bundle build``; ``bundle inspect`` shows the header fields.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from mirror.disk.store import MirrorState, StoredFile, write_state
from mirror.index.apt import parse_packages
from mirror.index.header import PackageHeader, check_agrees, read_header
from mirror.index.rpm import iter_primary, parse_repomd
from mirror.model import Package, PackageFormat, Relation
from plumbing.errors import ExitCode
from tests.cli_runner import CliResult, run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.upstream import UpstreamServer, UpstreamTree, copy_upstream
from tests.upstream.tamper import swap_package

StoredT = TypeVar("StoredT", bound=StoredFile)
CASES = {
    "deb": (
        "stable/deb/amd64",
        "nvidia-container-toolkit_1.17.8-1_amd64.deb",
        "nvidia-container-toolkit_1.18.0-1_amd64.deb",
        "Packages",
        "its own control data says version 1.18.0-1, the entry says 1.17.8-1",
    ),
    "rpm": (
        "stable/rpm/x86_64",
        "nvidia-container-toolkit-1.17.8-1.x86_64.rpm",
        "nvidia-container-toolkit-1.18.0-1.x86_64.rpm",
        "primary.xml",
        "its own header says version 1.18.0-1, the entry says 1.17.8-1",
    ),
}


def _entries(repo: Path, fmt: str) -> list[Package]:
    if fmt == "deb":
        return parse_packages((repo / "Packages").read_text(encoding="utf-8"))
    primary = parse_repomd((repo / "repodata/repomd.xml").read_bytes()).data["primary"]
    return list(iter_primary(io.BytesIO((repo / primary.href).read_bytes())))


def test_every_stand_in_package_of_the_local_upstream_agrees_with_its_signed_index_entry(
    upstream_tree: UpstreamTree,
) -> None:
    checked = 0
    for repo in sorted(p.parent for p in upstream_tree.root.glob("*/*/*/InRelease")) + sorted(
        p.parent.parent for p in upstream_tree.root.glob("*/*/*/repodata/repomd.xml")
    ):
        fmt = "deb" if (repo / "InRelease").exists() else "rpm"
        for entry in _entries(repo, fmt):
            path = repo / entry.filename
            check_agrees(read_header(path, fmt, what=str(path)), entry, what=str(path))
            checked += 1
    assert checked >= 80  # both channels, both formats, both arches (22 packages per repo today)


@pytest.fixture(params=sorted(CASES))
def tampered(
    request: pytest.FixtureRequest, upstream_tree: UpstreamTree, tmp_path: Path
) -> Iterator[tuple[str, UpstreamTree]]:
    """(format, a private upstream whose 1.17.8 toolkit file is the 1.18.0 one under a re-signed index)."""
    fmt = str(request.param)
    repo, victim, impostor, _, _ = CASES[fmt]
    tree = copy_upstream(upstream_tree, tmp_path / "tampered-site")
    swap_package(tree, tree.root / repo, victim, impostor)
    yield fmt, tree


def _sync(tree: UpstreamTree, url: str, dest: Path, fmt: str) -> CliResult:
    return run_mirror_sync(dest, url, tree.public_key, "--quiet", fmt=fmt)


def test_sync_refuses_a_package_whose_own_header_disagrees_with_its_re_signed_index_entry(
    tampered: tuple[str, UpstreamTree], tmp_path: Path
) -> None:
    fmt, tree = tampered
    repo, victim, _, index, says = CASES[fmt]
    dest = tmp_path / "mirror"
    with UpstreamServer(tree.root) as server:
        result = _sync(tree, server.url, dest, fmt)
        fetched = [r.path for r in server.log if r.path.endswith(victim)]
    assert result.exit_code == ExitCode.VERIFICATION_FAILED, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"gpu-airgap: error: {server.url}/{repo}/{victim} is not the package the signed {index} entry "
        f"it was fetched for describes: {says}"
    ]
    assert fetched  # its digest matched: only its header could tell
    assert not (dest / ".gpu-airgap/state.json").exists() and not (dest / ".gpu-airgap/staging").exists()
    assert not list(dest.glob(f"{repo}/*.{fmt}"))


def test_sync_refuses_a_deb_whose_control_data_has_other_depends_than_its_entry(
    upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    tree = copy_upstream(upstream_tree, tmp_path / "site")
    repo = tree.root / "stable/deb/amd64"
    victim = "nvidia-container-toolkit_1.17.8-1_amd64.deb"
    unpacked = tmp_path / "unpacked"
    subprocess.run(["dpkg-deb", "-R", str(repo / victim), str(unpacked)], check=True)
    control = unpacked / "DEBIAN/control"
    control.write_text(control.read_text().replace("Depends: ", "Depends: evil-helper, ", 1))
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-b", str(unpacked), str(tmp_path / "rebuilt.deb")],
        check=True,
        capture_output=True,
    )
    shutil.copyfile(tmp_path / "rebuilt.deb", repo / "rebuilt.deb")
    swap_package(tree, repo, victim, "rebuilt.deb")
    with UpstreamServer(tree.root) as server:
        result = _sync(tree, server.url, tmp_path / "mirror", "deb")
    assert result.exit_code == ExitCode.VERIFICATION_FAILED
    depends = "nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools (>= 1.17.8-1), libnvidia-container-tools (<< 2.0.0)"
    assert result.stderr.endswith(
        f"its own control data says Depends: evil-helper, {depends}, the entry says Depends: {depends}\n"
    ), result.stderr


def _header(
    requires: tuple[tuple[str, str | None, str | None], ...], provides: tuple[str, ...] = ()
) -> PackageHeader:
    return PackageHeader("rpm", "t", "1.0-1", "x86_64", (), requires, provides)


def _entry(*relations: Relation) -> Package:
    return Package(
        PackageFormat.RPM, "t", "1.0-1", "x86_64", "t.rpm", 1, depends=tuple((r,) for r in relations)
    )


@pytest.mark.parametrize(
    ("header", "entry", "problem"),
    [
        (_header((("a", ">=", "2-1"),)), _entry(Relation("a", ">=", "2-1")), None),
        # what createrepo_c leaves out of primary: file and soname requires, self-provided names
        (
            _header(
                (
                    ("a", None, None),
                    ("/bin/sh", None, None),
                    ("libc.so.6(GLIBC_2.2.5)(64bit)", None, None),
                    ("config(t)", "=", "1.0-1"),
                    ("t-compat", None, None),
                ),
                ("t", "t-compat"),
            ),
            _entry(Relation("a")),
            None,
        ),
        (
            _header((("a", ">=", "2-1"),)),
            _entry(Relation("a", ">=", "3-1")),
            "the entry requires a >= 3-1, which its own header does not",
        ),
        (
            _header((("a", None, None), ("evil", None, None))),
            _entry(Relation("a")),
            "its own header requires evil, which the entry does not",
        ),
    ],
    ids=["same", "createrepo-leaves-out", "other-version", "extra-package"],
)
def test_rpm_requires_must_agree_up_to_what_createrepo_leaves_out(
    header: PackageHeader, entry: Package, problem: str | None
) -> None:
    if problem is None:
        check_agrees(header, entry, what="t.rpm")
    else:
        with pytest.raises(Exception, match=problem):
            check_agrees(header, entry, what="t.rpm")


# -- bundle build ---------------------------------------------------------------------------------


def _forge_older_sync(mirror: Path, tampered: UpstreamTree, repo: str, victim: str) -> None:
    """Make ``mirror`` what a gpu-airgap without header checks would have made of the tampered upstream."""
    state = MirrorState.load(mirror)
    record = state.repo(repo)
    assert record is not None

    def digests(stored: StoredT, data: bytes) -> StoredT:
        return dataclasses.replace(
            stored,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest() if stored.sha256 else None,
            sha512=hashlib.sha512(data).hexdigest() if stored.sha512 else None,
        )

    signed = []
    for stored in record.provenance.signed_files:
        data = (tampered.root / stored.path).read_bytes()
        (mirror / stored.path).write_bytes(data)
        signed.append(digests(stored, data))
    data = (tampered.root / repo / victim).read_bytes()
    (mirror / repo / victim).write_bytes(data)
    packages = tuple(digests(p, data) if p.path == f"{repo}/{victim}" else p for p in record.packages)
    provenance = dataclasses.replace(record.provenance, signed_files=tuple(signed))
    repos = tuple(
        dataclasses.replace(r, packages=packages, provenance=provenance) if r is record else r
        for r in state.repos
    )
    write_state(mirror, dataclasses.replace(state, repos=repos))
    assert run_cli("mirror", "verify", "--mirror", str(mirror)).exit_code == 0  # every digest checks out


def test_bundle_build_refuses_a_mirror_package_whose_own_header_disagrees_with_its_signed_entry(
    tampered: tuple[str, UpstreamTree], synced_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    fmt, tree = tampered
    repo, victim, _, index, says = CASES[fmt]
    mirror = Path(shutil.copytree(synced_mirror, tmp_path / "mirror"))
    _forge_older_sync(mirror, tree, repo, victim)
    out = tmp_path / "out"
    out.mkdir()
    result = run_bundle_build(
        mirror, operator_key, out / "b.tar.zst", target=f"{fmt}/{repo.rsplit('/', 1)[1]}"
    )
    assert result.exit_code == ExitCode.VERIFICATION_FAILED, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"gpu-airgap: error: {mirror / repo / victim} is not the package the signed {index} entry it was fetched for describes: {says}"
    ]
    assert list(out.iterdir()) == []


def test_bundle_inspect_shows_each_package_s_own_header(
    synced_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    out = tmp_path / "b.tar.zst"
    built = run_bundle_build(synced_mirror, operator_key, out, "--target", "rpm/x86_64")
    assert built.exit_code == 0, built.stderr
    lines = run_cli("bundle", "inspect", str(out)).stdout.splitlines()
    shown = [
        dict(part.split(": ", 1) for part in line.split("own header: ", 1)[1].split("; "))
        for line in lines
        if "own header: " in line
    ]
    deb = next(h for h in shown if h.get("Package") == "nvidia-container-toolkit")
    assert deb == {
        "Package": "nvidia-container-toolkit",
        "Version": "1.17.8-1",
        "Architecture": "amd64",
        "Depends": "nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools (>= 1.17.8-1), libnvidia-container-tools (<< 2.0.0)",
        "Breaks": "nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook",
        "Replaces": "nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook",
    }
    rpm = next(h for h in shown if h.get("Name") == "nvidia-container-toolkit")
    assert rpm == {
        "Name": "nvidia-container-toolkit",
        "Version": "1.17.8",
        "Release": "1",
        "Arch": "x86_64",
        "Requires": "libnvidia-container-tools >= 1.17.8-1, libnvidia-container-tools < 2.0.0, nvidia-container-toolkit-base = 1.17.8-1",
    }
    assert len(shown) == 8  # every package of both targets
    data = json.loads(run_cli("bundle", "inspect", str(out), "--json").stdout)
    rpm_target = next(t for t in data["targets"] if t["format"] == "rpm")
    toolkit = next(p for p in rpm_target["packages"] if p["name"] == "nvidia-container-toolkit")
    assert ["Release", "1"] in toolkit["header"] and ["Arch", "x86_64"] in toolkit["header"]
