"""The safe reader refuses crafted archives, and the manifest schema is strict: with real signatures, no mirror.

Each crafted archive carries a manifest validly signed by the trusted operator key, so the
refusals below come from the member checks themselves, not from a bad signature.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.bundle import BundleVerificationError, extract_verified, inspect, verify
from installer.manifest import (
    MANIFEST_NAME,
    SIGNATURE_NAME,
    FileEntry,
    Manifest,
    ManifestError,
    PackageEntry,
    Provenance,
    SignedFile,
    TargetEntry,
)
from installer.manifest_parser import parse_manifest
from plumbing.gpg import Keyring
from tests.gpgkeys import TestKey

GOOD = b"good payload\n"


@pytest.fixture(scope="module")
def keyring(operator_key: TestKey) -> Iterator[Keyring]:
    with Keyring.open([operator_key.public]) as keys:
        yield keys


def _manifest(fpr: str, listed: dict[str, bytes]) -> Manifest:
    return Manifest(
        tool_version="0.1.0",
        created="2026-01-01T00:00:00Z",
        channel="stable",
        toolkit_version="1.17.8",
        upstream_url="https://nvidia.github.io/libnvidia-container",
        upstream_fingerprint="C95B321B61E88C1809C4F759DDCAE044F796ECB0",
        signer=fpr,
        targets=(),
        files=tuple(FileEntry(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in sorted(listed.items())),
    )


def _info(
    name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, **attrs: object
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, data


def craft(
    path: Path,
    key: TestKey,
    members: list[tuple[tarfile.TarInfo, bytes]],
    listed: dict[str, bytes],
    *,
    head_first: bool = True,
) -> Path:
    """Write a tar whose signed manifest lists ``listed`` and whose other members are ``members``."""
    manifest = _manifest(key.fingerprint, listed).to_json()
    signature = key.sign_detached(manifest)
    head = [_info(MANIFEST_NAME, manifest), _info(SIGNATURE_NAME, signature)]
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in (head + members) if head_first else (members + head):
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


ONLY_REGULAR = "a bundle holds only regular files"
UNSAFE_NAME = "refusing an absolute, '..' or otherwise unsafe member name"
#: case: (members after the signed head, what the manifest lists, the one problem it must be refused for)
UNSAFE = {
    "absolute path": ([_info("/tmp/gpu-airgap-evil", GOOD)], {}, f"/tmp/gpu-airgap-evil: {UNSAFE_NAME}"),
    "dot-dot escape": ([_info("../gpu-airgap-evil", GOOD)], {}, f"../gpu-airgap-evil: {UNSAFE_NAME}"),
    "dot-dot inside": (
        [_info("a/../../gpu-airgap-evil", GOOD)],
        {},
        f"a/../../gpu-airgap-evil: {UNSAFE_NAME}",
    ),
    "symlink": (
        [_info("payload", GOOD), _info("link", kind=tarfile.SYMTYPE, linkname="/etc/passwd")],
        {"payload": GOOD},
        f"link: refusing a symlink: {ONLY_REGULAR}",
    ),
    "hard link": (
        [_info("payload", GOOD), _info("hard", kind=tarfile.LNKTYPE, linkname="payload")],
        {"payload": GOOD},
        f"hard: refusing a hard link: {ONLY_REGULAR}",
    ),
    "character device": (
        [_info("payload", GOOD), _info("null", kind=tarfile.CHRTYPE, devmajor=1, devminor=3)],
        {"payload": GOOD},
        f"null: refusing a device node: {ONLY_REGULAR}",
    ),
    "block device": (
        [_info("payload", GOOD), _info("sda", kind=tarfile.BLKTYPE, devmajor=8, devminor=0)],
        {"payload": GOOD},
        f"sda: refusing a device node: {ONLY_REGULAR}",
    ),
    "fifo": (
        [_info("payload", GOOD), _info("pipe", kind=tarfile.FIFOTYPE)],
        {"payload": GOOD},
        f"pipe: refusing a fifo: {ONLY_REGULAR}",
    ),
    "directory entry": (
        [_info("dir", kind=tarfile.DIRTYPE)],
        {},
        f"dir: refusing a directory: {ONLY_REGULAR}",
    ),
    "duplicate name": (
        [_info("payload", GOOD), _info("payload", GOOD)],
        {"payload": GOOD},
        "payload: appears twice in the archive",
    ),
    "member missing from the manifest": (
        [_info("payload", GOOD), _info("extra", GOOD)],
        {"payload": GOOD},
        "extra: is not listed in the signed manifest; stopped before reading it",
    ),
    "manifest entry missing from the archive": (
        [_info("payload", GOOD)],
        {"payload": GOOD, "absent": GOOD},
        "absent: is listed in the manifest but missing from the archive",
    ),
    "size beyond the manifest (bomb)": (
        [_info("payload", GOOD * 1000)],
        {"payload": GOOD},
        "payload: has 13000 bytes, the manifest says 13; stopped before reading it",
    ),
    "altered content": (
        [_info("payload", b"evil payload\n")],
        {"payload": GOOD},
        "payload: does not match its sha256 in the signed manifest",
    ),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_crafted_unsafe_archive_is_refused_for_its_reason_with_nothing_written_outside_staging(
    case: str, operator_key: TestKey, keyring: Keyring, tmp_path: Path
) -> None:
    members, listed, reason = UNSAFE[case]
    bundle = craft(tmp_path / "crafted.tar", operator_key, members, listed)
    staging = tmp_path / "work" / "staging"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(BundleVerificationError) as refused:
        extract_verified(bundle, keyring, staging)
    assert str(refused.value) == f"bundle crafted.tar failed verification at {reason}"
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert [p for p in after if p not in before] == [Path("work"), Path("work/staging")]
    assert list(staging.iterdir()) == []  # what was extracted before the refusal is gone too
    assert not Path("/tmp/gpu-airgap-evil").exists() and not (tmp_path / "work" / "gpu-airgap-evil").exists()
    report = verify(bundle, keyring)  # verify lists the same problem without extracting
    assert report.signer == operator_key.fingerprint
    assert [str(p) for p in report.problems] == [reason]


def test_a_member_before_the_signed_manifest_is_refused(
    operator_key: TestKey, keyring: Keyring, tmp_path: Path
) -> None:
    bundle = craft(
        tmp_path / "b.tar", operator_key, [_info("payload", GOOD)], {"payload": GOOD}, head_first=False
    )
    report = verify(bundle, keyring)
    assert report.first_bad == "payload" and "comes before manifest.json" in report.problems[0].message


def test_a_good_crafted_archive_extracts_exactly_its_members(
    operator_key: TestKey, keyring: Keyring, tmp_path: Path
) -> None:
    bundle = craft(tmp_path / "b.tar", operator_key, [_info("dir/payload", GOOD)], {"dir/payload": GOOD})
    staged = extract_verified(bundle, keyring, tmp_path / "staging")
    assert sorted(str(p.relative_to(staged.root)) for p in staged.root.rglob("*") if p.is_file()) == [
        "dir/payload",
        MANIFEST_NAME,
        SIGNATURE_NAME,
    ]
    assert staged.path_of("dir/payload").read_bytes() == GOOD and staged.signer == operator_key.fingerprint
    assert (staged.root.stat().st_mode & 0o777) == 0o700


def test_verify_lists_every_problem_and_names_the_first_bad_member(
    operator_key: TestKey, keyring: Keyring, tmp_path: Path
) -> None:
    members = [_info("a", b"changed bytes"), _info("b", GOOD), _info("c", b"changed bytes")]
    bundle = craft(tmp_path / "b.tar", operator_key, members, {"a": GOOD, "b": GOOD, "c": GOOD, "d": GOOD})
    report = verify(bundle, keyring)
    assert [str(p) for p in report.problems] == [
        "a: does not match its sha256 in the signed manifest",
        "c: does not match its sha256 in the signed manifest",
        "d: is listed in the manifest but missing from the archive",
    ]
    assert (
        report.first_bad == "a" and report.members_checked == 2 + 3
    )  # manifest.json and its signature, a, b, c


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        (_info("c", GOOD), "c: is not listed in the signed manifest; stopped before reading it"),
        (_info("b", GOOD * 2), "b: has 26 bytes, the manifest says 13; stopped before reading it"),
    ],
    ids=["unlisted", "larger-than-listed"],
)
def test_verify_stops_at_a_member_it_would_have_to_read_blindly(
    operator_key: TestKey,
    keyring: Keyring,
    tmp_path: Path,
    member: tuple[tarfile.TarInfo, bytes],
    problem: str,
) -> None:
    members = [_info("a", b"changed bytes"), member, _info("e", GOOD)]
    bundle = craft(tmp_path / "b.tar", operator_key, members, {"a": GOOD, "b": GOOD, "d": GOOD, "e": GOOD})
    report = verify(bundle, keyring)
    assert [str(p) for p in report.problems] == [
        "a: does not match its sha256 in the signed manifest",
        problem,
    ]
    # manifest.json, its signature and a: neither that member's data nor anything after it was read
    assert report.members_checked == 2 + 1


def test_inspect_needs_no_key_and_reads_only_the_manifest(operator_key: TestKey, tmp_path: Path) -> None:
    bundle = craft(tmp_path / "b.tar", operator_key, [_info("payload", b"tampered")], {"payload": GOOD})
    assert inspect(bundle).signer == operator_key.fingerprint


def test_a_truncated_archive_is_reported_not_crashed_on(
    operator_key: TestKey, keyring: Keyring, tmp_path: Path
) -> None:
    bundle = craft(
        tmp_path / "b.tar", operator_key, [_info("payload", GOOD * 4000)], {"payload": GOOD * 4000}
    )
    data = bundle.read_bytes()
    bundle.write_bytes(data[: len(data) // 2])
    report = verify(bundle, keyring)
    assert not report.ok and "damaged or truncated" in report.problems[0].message


# -- manifest schema -------------------------------------------------------------------------------


def _full_manifest() -> Manifest:
    pkg = PackageEntry(
        "libnvidia-container1",
        "1.17.8-1",
        "amd64",
        "targets/deb-amd64/l.deb",
        10,
        "a" * 64,
        0,
        ("libc6 (>= 2.27)",),
        "https://x/l.deb",
    )
    target = TargetEntry(
        "deb",
        "amd64",
        "targets/deb-amd64",
        "1.17.8-1",
        Provenance(
            "https://x/stable/deb/amd64",
            "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
            "2026-09-18T21:09:04Z",
            (SignedFile("stable/deb/amd64/InRelease", 1477, None, "b" * 128),),
        ),
        (pkg,),
        ("libc6 (>= 2.27)",),
    )
    return Manifest(
        "0.1.0",
        "2026-01-01T00:00:00Z",
        "stable",
        "1.17.8",
        "https://x",
        "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
        "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
        (target,),
        (FileEntry("install.sh", 5, "c" * 64, "node-installer"),),
    )


def test_manifest_json_is_canonical_and_round_trips() -> None:
    manifest = _full_manifest()
    data = manifest.to_json()
    assert data.endswith(b"}\n") and b", " not in data and b": " not in data
    assert parse_manifest(data) == manifest and parse_manifest(data).to_json() == data
    assert manifest.members() == {"install.sh": (5, "c" * 64), "targets/deb-amd64/l.deb": (10, "a" * 64)}


def test_manifest_parser_lists_every_problem_at_once() -> None:
    import json

    raw = json.loads(_full_manifest().to_json())
    raw["schema"] = 7
    raw["signer"] = "not-a-fingerprint"
    raw["files"][0]["path"] = "../../etc/passwd"
    raw["targets"][0]["packages"][0]["sha256"] = "XYZ"
    del raw["channel"]
    with pytest.raises(ManifestError) as caught:
        parse_manifest(json.dumps(raw).encode())
    assert len(caught.value.problems) == 5, caught.value.problems
    assert "schema 7 is not supported" in str(caught.value)


def test_manifest_refuses_duplicate_members_and_non_json() -> None:
    import json

    raw = json.loads(_full_manifest().to_json())
    raw["files"].append(dict(raw["files"][0]))
    with pytest.raises(ManifestError, match="listed 2 times"):
        parse_manifest(json.dumps(raw).encode())
    with pytest.raises(ManifestError, match="not UTF-8 JSON"):
        parse_manifest(b"\xff{")


def test_manifest_carries_breaks_per_package_and_a_manifest_without_them_still_parses() -> None:
    import dataclasses
    import json

    manifest = _full_manifest()
    pkg = dataclasses.replace(
        manifest.targets[0].packages[0], breaks=("nvidia-container-runtime (<= 3.5.0-1)", "old-hook")
    )
    with_breaks = dataclasses.replace(
        manifest, targets=(dataclasses.replace(manifest.targets[0], packages=(pkg,)),)
    )
    raw = json.loads(with_breaks.to_json())
    assert raw["targets"][0]["packages"][0]["breaks"] == ["nvidia-container-runtime (<= 3.5.0-1)", "old-hook"]
    assert parse_manifest(with_breaks.to_json()) == with_breaks
    # Bundles built before the field existed: no key at all, read as "not stated" (None), not "none".
    assert "breaks" not in json.loads(manifest.to_json())["targets"][0]["packages"][0]
    assert parse_manifest(manifest.to_json()).targets[0].packages[0].breaks is None


def test_manifest_refuses_a_breaks_entry_that_is_not_a_relation() -> None:
    import json

    raw = json.loads(_full_manifest().to_json())
    raw["targets"][0]["packages"][0]["breaks"] = ["good-name (>= 1)", "(a if b) or worse"]
    with pytest.raises(
        ManifestError, match=r"breaks has '\(a if b\) or worse', which is not a package relation"
    ):
        parse_manifest(json.dumps(raw).encode())


def test_manifest_refuses_member_and_total_sizes_beyond_the_limits() -> None:
    import json

    from installer.manifest import MAX_MEMBER_SIZE, MAX_TOTAL_SIZE

    raw = json.loads(_full_manifest().to_json())
    raw["files"][0]["size"] = MAX_MEMBER_SIZE + 1
    with pytest.raises(ManifestError, match=r"files\[0\]\.size \d+ is outside"):
        parse_manifest(json.dumps(raw).encode())
    count = MAX_TOTAL_SIZE // MAX_MEMBER_SIZE + 1  # each member within its limit, together too much
    raw["files"] = [
        {"path": f"f{i}", "size": MAX_MEMBER_SIZE, "sha256": "c" * 64, "role": ""} for i in range(count)
    ]
    with pytest.raises(ManifestError, match=r"the members add up to \d+ bytes, more than"):
        parse_manifest(json.dumps(raw).encode())


def test_an_archive_with_more_members_than_the_limit_is_refused_before_extracting_them(
    operator_key: TestKey, keyring: Keyring, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import installer.bundle as reader

    monkeypatch.setattr(reader, "MAX_MEMBERS", 3)
    listed = {f"m{i}": GOOD for i in range(3)}
    members = [_info(f"m{i}", GOOD) for i in range(3)] + [_info(f"x{i}", GOOD) for i in range(50)]
    bundle = craft(tmp_path / "many.tar", operator_key, members, listed)
    report = verify(
        bundle, keyring
    )  # verify keeps going after ordinary problems, but not past the count limit
    assert report.problems[-1].message == "the archive has more than 3 members"
    assert len(report.problems) < 10
    staging = tmp_path / "staging"
    with pytest.raises(BundleVerificationError):
        extract_verified(bundle, keyring, staging)
    assert list(staging.iterdir()) == []


def test_verify_writes_nothing_outside_its_private_temporary_directory(
    operator_key: TestKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import tempfile

    from tests.cli_runner import run_cli

    (tmp_path / "bundles").mkdir()
    bundle = craft(tmp_path / "bundles" / "b.tar", operator_key, [_info("payload", GOOD)], {"payload": GOOD})
    temp, home = tmp_path / "tmp", tmp_path / "home"
    temp.mkdir()
    home.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = run_cli("bundle", "verify", str(bundle), "--keyring", str(operator_key.public), "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["ok"] is True
    assert (
        sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    )  # the gpg home came and went


def test_verify_command_lists_every_problem_and_exits_3_naming_the_first(
    operator_key: TestKey, tmp_path: Path
) -> None:
    from tests.cli_runner import run_cli

    members = [_info("a", b"changed bytes"), _info("b", GOOD), _info("c", b"changed bytes")]
    bundle = craft(tmp_path / "b.tar", operator_key, members, {"a": GOOD, "b": GOOD, "c": GOOD, "d": GOOD})
    result = run_cli("bundle", "verify", str(bundle), "--keyring", str(operator_key.public))
    assert result.exit_code == 3
    assert result.stdout.splitlines() == [
        "FAILED: b.tar",
        "  a: does not match its sha256 in the signed manifest",
        "  c: does not match its sha256 in the signed manifest",
        "  d: is listed in the manifest but missing from the archive",
    ]
    assert (
        result.stderr.count("\n") == 1
        and "failed verification at a: does not match its sha256" in result.stderr
    )
    assert "2 more problem(s): listed above" in result.stderr


def test_a_target_listed_twice_is_named_as_typed() -> None:
    import json

    raw = json.loads(_full_manifest().to_json())
    raw["targets"].append(dict(raw["targets"][0], repo_dir="targets/deb-amd64-again", packages=[]))
    with pytest.raises(ManifestError) as caught:
        parse_manifest(json.dumps(raw).encode())
    assert "target deb/amd64 is listed more than once" in caught.value.problems
