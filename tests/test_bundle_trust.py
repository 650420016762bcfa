"""Issue 24 items 10-12 and 18-20: what a node trusts in a bundle beyond a good signature.

Real keys (:mod:`tests.gpgkeys`), real bundles from ``bundle build`` over a real ``mirror sync``, and
the real ``bundle verify`` / ``install`` / ``status`` commands: which key signed (and only one key
trusted), no SHA-1 signatures, a release candidate said so, a signed expiry, the build order of one
release, and two signing keys for a rotation. The clock is injected (``installer.freshness.utc_now``
for the commands, ``NodeEnv.clock`` for the library), never waited for.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from installer import freshness
from installer.env import NodeEnv
from installer.install import InstallResult, install
from installer.manifest import MANIFEST_NAME, SIGNATURE_NAME
from installer.nodecheck import NODE_SUMS, NODE_SUMS_SIGNATURE
from installer.plan import InstallOptions
from installer.state import load_state
from plumbing.errors import ExitCode, SignatureError, VerificationError
from plumbing.gpg import judge_status
from tests import bundle_tamper as tamper
from tests.cli_runner import CliResult, install_argv, run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey, make_key
from tests.node_fixtures import node_python, seed_containerd_node
from tests.oci_registry import Registry
from tests.test_node_trust import Node
from tests.upstream import UpstreamServer, UpstreamTree, stop_agent


class NoRestarts:
    """Installs here run under --root, where nothing is restarted; any call is a bug."""

    def restart(self, unit: str) -> None:
        raise AssertionError(f"restarted {unit} under --root")

    def is_active(self, unit: str) -> bool:
        raise AssertionError(f"asked about {unit} under --root")

    def is_stopped(self, unit: str) -> bool:
        raise AssertionError(f"asked about {unit} under --root")


def _build(
    mirror: Path, out: Path, *keys: TestKey, extra: tuple[str, ...] = (), epoch: Optional[int] = None
) -> CliResult:
    """``bundle build`` of 1.17.8 deb/amd64 (or what ``extra`` says), signed by ``keys`` (all in one gpg home)."""
    args = [
        "bundle",
        "build",
        "--mirror",
        str(mirror),
        "--target",
        "deb/amd64",
        "--output",
        str(out),
        "--json",
    ]
    for key in keys:
        args += ["--sign-key", key.fingerprint]
    previous = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None:
        os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
    try:
        return run_cli(*args, "--gnupghome", str(keys[0].home), *extra)
    finally:
        if previous is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = previous


def _verify(bundle: Path, key: Path, *extra: str) -> CliResult:
    return run_cli("bundle", "verify", str(bundle), "--keyring", str(key), *extra)


def _member(bundle: Path, name: str) -> bytes:
    return dict((info.name, data) for info, data in tamper.members(bundle))[name]


def _manifest(bundle: Path) -> dict[str, object]:
    return json.loads(_member(bundle, MANIFEST_NAME))


def _sha1_signature(key: TestKey, data: bytes) -> bytes:
    """A real armored detached signature over ``data`` made with SHA-1."""
    return subprocess.run(
        [
            *("gpg", "--homedir", str(key.home), "--batch", "--quiet", "--local-user", key.fingerprint),
            *("--digest-algo", "SHA1", "--armor", "--detach-sign"),
        ],
        input=data,
        capture_output=True,
        check=True,
    ).stdout


def _two_keys(tmp_path: Path, *keys: TestKey) -> Path:
    both = tmp_path / "two-keys.asc"
    both.write_bytes(b"".join(key.public.read_bytes() for key in keys))
    return both


def _at(monkeypatch: pytest.MonkeyPatch, moment: datetime) -> None:
    monkeypatch.setattr(freshness, "utc_now", lambda: moment)


def _created(bundle: Path) -> datetime:
    built = freshness.parse_time(str(_manifest(bundle)["created"]))
    assert built is not None
    return built


# -- 11: one trusted key, named ------------------------------------------------------------------------


def test_verify_names_the_signers_full_fingerprint_in_text_and_json(
    deb_bundle: Path, operator_key: TestKey
) -> None:
    text = _verify(deb_bundle, operator_key.public)
    assert text.exit_code == 0, text.stderr
    assert f"is signed by {operator_key.fingerprint};" in text.stdout
    data = json.loads(_verify(deb_bundle, operator_key.public, "--json").stdout)
    assert data["signer"] == operator_key.fingerprint and data["ok"] is True


def test_a_key_file_with_two_keys_is_refused_unless_fingerprint_pins_the_signer(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    both = _two_keys(tmp_path, operator_key, other_key)
    refused = _verify(deb_bundle, both)
    assert refused.exit_code == ExitCode.USAGE, refused.stdout + refused.stderr
    assert f"the key file {both} holds 2 keys" in refused.stderr
    assert "pass --fingerprint with the full fingerprint" in refused.stderr

    pinned = _verify(deb_bundle, both, "--fingerprint", operator_key.fingerprint)
    assert pinned.exit_code == 0, pinned.stderr
    assert f"is signed by {operator_key.fingerprint};" in pinned.stdout

    # the other key of the file is not trusted once one is pinned: its absence from the signers is the failure
    wrong = _verify(deb_bundle, both, "--fingerprint", other_key.fingerprint)
    assert wrong.exit_code == ExitCode.VERIFICATION_FAILED
    # the full fingerprint, as every other message shows a signer, not gpg's 16-hex key id (#25.10)
    assert f"signed by key {operator_key.fingerprint}, which is not in the trusted keyring" in wrong.stdout


@pytest.mark.parametrize("value", ["ABCD1234", "0x1234567890ABCDEF", "not-hex"])
def test_fingerprint_must_be_the_full_forty_hex_digits(
    deb_bundle: Path, operator_key: TestKey, value: str
) -> None:
    result = _verify(deb_bundle, operator_key.public, "--fingerprint", value)
    assert result.exit_code == ExitCode.USAGE
    assert f"--fingerprint {value!r} is not a full 40-hex-digit fingerprint" in result.stderr


def test_a_fingerprint_the_key_file_does_not_hold_is_refused(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey
) -> None:
    result = _verify(deb_bundle, operator_key.public, "--fingerprint", other_key.fingerprint)
    assert result.exit_code == ExitCode.USAGE
    assert f"does not hold the key --fingerprint {other_key.fingerprint} names" in result.stderr


# -- 12: no SHA-1 ------------------------------------------------------------------------------------


def test_a_manifest_signed_with_sha1_is_refused(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    manifest = _member(deb_bundle, MANIFEST_NAME)
    weak = tamper.repack(
        deb_bundle,
        tmp_path / "sha1.tar.zst",
        replace={SIGNATURE_NAME: _sha1_signature(operator_key, manifest)},
    )
    result = _verify(weak, operator_key.public)
    assert result.exit_code == ExitCode.VERIFICATION_FAILED, result.stdout
    assert (
        f"manifest.json is signed with SHA-1 by key {operator_key.fingerprint}, a digest too weak to trust"
        in result.stdout
    )


def test_a_node_check_signed_with_sha1_is_refused(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    sums = _member(deb_bundle, NODE_SUMS)
    weak = tamper.resigned_manifest(
        deb_bundle,
        tmp_path / "sha1-node.tar.zst",
        operator_key,
        replace={NODE_SUMS_SIGNATURE: _sha1_signature(operator_key, sums)},
    )
    result = _verify(weak, operator_key.public)
    assert result.exit_code == ExitCode.VERIFICATION_FAILED, result.stdout
    assert f"{NODE_SUMS_SIGNATURE}: does not verify with the operator key" in result.stdout
    assert "signed with SHA-1" in result.stdout


# -- 18: expiry and age ------------------------------------------------------------------------------


def test_every_verify_says_how_old_the_bundle_is(
    deb_bundle: Path, operator_key: TestKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    _at(monkeypatch, _created(deb_bundle) + timedelta(days=3, hours=2))
    text = _verify(deb_bundle, operator_key.public)
    assert text.exit_code == 0, text.stdout
    assert "built 3 days ago" in text.stdout and "no expiry" in text.stdout
    data = json.loads(_verify(deb_bundle, operator_key.public, "--json").stdout)
    assert data["age"].startswith("built 3 days ago") and data["expires"] is None


def test_an_expired_bundle_is_refused_unless_allowed(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "expiring.tar.zst"
    built = _build(deb_mirror, out, operator_key, extra=("--expires", "30d"))
    assert built.exit_code == 0, built.stderr
    created = _created(out)
    assert _manifest(out)["expires"] == freshness.format_time(created + timedelta(days=30))
    assert json.loads(built.stdout)["expires"] == _manifest(out)["expires"]

    _at(monkeypatch, created + timedelta(days=29))
    fresh = _verify(out, operator_key.public)
    assert fresh.exit_code == 0 and "expires " in fresh.stdout

    _at(monkeypatch, created + timedelta(days=32))
    expired = _verify(out, operator_key.public)
    assert expired.exit_code == ExitCode.VERIFICATION_FAILED, expired.stdout
    assert "manifest.json: the bundle expired 2 days ago" in expired.stdout
    assert "built 32 days ago" in expired.stdout and "--allow-expired" in expired.stdout
    allowed = _verify(out, operator_key.public, "--allow-expired")
    assert allowed.exit_code == 0, allowed.stdout


@pytest.mark.parametrize("value", ["30", "1y", "-3d", "0d", "three days"])
def test_expires_takes_only_a_duration(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path, value: str
) -> None:
    result = _build(deb_mirror, tmp_path / "b.tar.zst", operator_key, extra=("--expires", value))
    assert result.exit_code == ExitCode.USAGE
    assert f"--expires {value!r} is not a duration like 12h, 30d or 8w" in result.stderr
    assert not (tmp_path / "b.tar.zst").exists()


# -- 10, 18, 19 at install: a real root ----------------------------------------------------------------


@pytest.fixture(scope="module")
def past_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestKey]:
    """An operator key made 30 days ago, so bundles can be built at earlier SOURCE_DATE_EPOCHs."""
    key = make_key(
        tmp_path_factory.mktemp("past-key"),
        "past operator <past@example.invalid>",
        created=int(time.time()) - 30 * 86400,
    )
    yield key
    stop_agent(key.home)


def _install(bundle: Path, key: Path, root: Path, now: datetime, **options: Any) -> InstallResult:
    return install(
        bundle, key, InstallOptions(root=root, **options), NodeEnv(services=NoRestarts(), clock=lambda: now)
    )


def _two_builds(mirror: Path, key: TestKey, tmp_path: Path, start: int, gap: int) -> tuple[Path, Path, Path]:
    """Two bundles of one release built ``gap`` seconds apart, and a fresh node root: (older, newer, root)."""
    older, newer = tmp_path / "older.tar.zst", tmp_path / "newer.tar.zst"
    assert _build(mirror, older, key, epoch=start).exit_code == 0
    assert _build(mirror, newer, key, epoch=start + gap).exit_code == 0
    return older, newer, seed_containerd_node(tmp_path / "root")


def test_install_refuses_an_expired_bundle_and_names_signer_and_age_otherwise(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    out = tmp_path / "expiring.tar.zst"
    assert _build(deb_mirror, out, operator_key, extra=("--expires", "12h")).exit_code == 0
    root = seed_containerd_node(tmp_path / "root")
    created = _created(out)
    with pytest.raises(VerificationError, match=r"manifest.json: the bundle expired 1 hour ago") as refused:
        _install(out, operator_key.public, root, created + timedelta(hours=13))
    assert refused.value.exit_code == ExitCode.VERIFICATION_FAILED
    assert load_state(root) is None
    result = _install(out, operator_key.public, root, created + timedelta(hours=13), allow_expired=True)
    data = result.to_dict()
    assert data["signer"] == operator_key.fingerprint
    assert data["age"].startswith("built 13 hours ago") and data["expires"] == _manifest(out)["expires"]


def test_build_refuses_an_expiry_already_past_at_its_build_time(
    deb_mirror: Path, past_key: TestKey, tmp_path: Path
) -> None:
    """SOURCE_DATE_EPOCH sets the build time, and the expiry counts from it: 20 days back plus 7 is past."""
    epoch = int(time.time()) - 20 * 86400
    out = tmp_path / "stale.tar.zst"
    result = _build(deb_mirror, out, past_key, extra=("--expires", "7d"), epoch=epoch)
    assert result.exit_code == ExitCode.USAGE
    assert "--expires: the bundle would expire" in result.stderr and "which is already past" in result.stderr
    assert not out.exists()
    assert _build(deb_mirror, out, past_key, extra=("--expires", "30d"), epoch=epoch).exit_code == 0


def test_install_refuses_a_bundle_built_before_the_installed_one_of_the_same_release(
    deb_mirror: Path, past_key: TestKey, tmp_path: Path
) -> None:
    older, newer, root = _two_builds(deb_mirror, past_key, tmp_path, int(time.time()) - 20 * 86400, 86400)
    now = datetime.now(timezone.utc)
    _install(newer, past_key.public, root, now)
    state = load_state(root)
    assert state is not None and state.built == _manifest(newer)["created"]

    with pytest.raises(VerificationError) as refused:
        _install(older, past_key.public, root, now)
    assert refused.value.exit_code == ExitCode.VERIFICATION_FAILED
    assert str(refused.value) == (
        f"this bundle of release 1.17.8 was built {_manifest(older)['created']}, 1 day before the bundle installed "
        f"here ({_manifest(newer)['created']}); an older build may be a replay, so pass --allow-downgrade to install it anyway"
    )
    after = load_state(root)
    assert after is not None and after.built == state.built  # nothing changed

    # the same build again, and a later one, are no downgrade; --allow-downgrade takes the older one
    assert _install(newer, past_key.public, root, now).outcome == "up-to-date"
    _install(older, past_key.public, root, now, allow_downgrade=True)
    back = load_state(root)
    assert back is not None and back.built == _manifest(older)["created"]


def test_the_cli_install_refuses_the_older_build_with_exit_3(
    deb_mirror: Path, past_key: TestKey, tmp_path: Path
) -> None:
    older, newer, root = _two_builds(deb_mirror, past_key, tmp_path, int(time.time()) - 10 * 86400, 3600)
    first = run_cli("install", str(newer), "--keyring", str(past_key.public), "--root", str(root), "--json")
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["signer"] == past_key.fingerprint
    again = run_cli("install", str(older), "--keyring", str(past_key.public), "--root", str(root))
    assert again.exit_code == ExitCode.VERIFICATION_FAILED, again.stderr
    assert "was built" in again.stderr and "1 hour before the bundle installed here" in again.stderr


# -- 10: a release candidate says so -------------------------------------------------------------------


@pytest.fixture(scope="module")
def experimental_mirror(
    upstream_tree: UpstreamTree,
    _upstream_session_server: UpstreamServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    dest = tmp_path_factory.mktemp("experimental-mirror")
    synced = run_mirror_sync(
        dest,
        _upstream_session_server.url,
        upstream_tree.public_key,
        "--channel",
        "experimental",
        "--quiet",
        version=None,
    )
    assert synced.exit_code == 0, synced.stderr
    return dest


def test_a_release_candidate_bundle_says_so_at_build_verify_install_and_status(
    experimental_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    note = "release candidate: this bundle is of NVIDIA's experimental channel, which is not for production"
    out = tmp_path / "rc.tar.zst"
    built = _build(experimental_mirror, out, operator_key, extra=("--channel", "experimental"))
    assert built.exit_code == 0, built.stderr
    assert json.loads(built.stdout)["release_candidate"] is True
    plain = run_bundle_build(
        experimental_mirror,
        operator_key,
        tmp_path / "rc-text.tar.zst",
        "--channel",
        "experimental",
        version=None,
    )
    assert plain.exit_code == 0 and plain.stdout.count(note) == 1, plain.stdout

    verified = _verify(out, operator_key.public)
    assert verified.exit_code == 0 and verified.stdout.count(note) == 1, verified.stdout
    inspected = run_cli("bundle", "inspect", str(out))
    assert inspected.stdout.count(note) == 1 and "expires: never" in inspected.stdout, inspected.stdout
    report = json.loads(_verify(out, operator_key.public, "--json").stdout)
    assert report["release_candidate"] is True and report["channel"] == "experimental"

    root = seed_containerd_node(tmp_path / "root")
    installed = run_cli("install", str(out), "--keyring", str(operator_key.public), "--root", str(root))
    assert installed.exit_code == 0, installed.stderr
    assert installed.stdout.count(note) == 1, installed.stdout
    again = run_cli("install", str(out), "--keyring", str(operator_key.public), "--root", str(root), "--json")
    assert (
        json.loads(again.stdout)["release_candidate"] is True
        and json.loads(again.stdout)["channel"] == "experimental"
    )
    status = run_cli("status", "--root", str(root))
    assert status.stdout.count(note) == 1, status.stdout
    facts = json.loads(run_cli("status", "--root", str(root), "--json").stdout)
    assert facts["release_candidate"] is True and facts["channel"] == "experimental"


def test_a_stable_bundle_says_nothing_of_release_candidates(deb_bundle: Path, operator_key: TestKey) -> None:
    verified = _verify(deb_bundle, operator_key.public)
    assert verified.exit_code == 0 and "release candidate" not in verified.stdout
    assert json.loads(_verify(deb_bundle, operator_key.public, "--json").stdout)["release_candidate"] is False


# -- 20: two signing keys for a rotation (the keys: conftest.py rotation) ---------------------------------


def test_a_bundle_signed_by_two_keys_verifies_for_a_node_holding_either(
    deb_mirror: Path, rotation: tuple[TestKey, TestKey], other_key: TestKey, tmp_path: Path
) -> None:
    old, new = rotation
    out = tmp_path / "rotating.tar.zst"
    built = _build(deb_mirror, out, old, new)
    assert built.exit_code == 0, built.stderr
    assert json.loads(built.stdout)["signers"] == [old.fingerprint, new.fingerprint]
    manifest = _manifest(out)
    assert manifest["signer"] == old.fingerprint and manifest["signers"] == [old.fingerprint, new.fingerprint]
    members = dict((info.name, data) for info, data in tamper.members(out))
    for name in (SIGNATURE_NAME, NODE_SUMS_SIGNATURE):
        assert members[name].count(b"-----BEGIN PGP SIGNATURE-----") == 2, name

    for key in (
        old,
        new,
    ):  # a node that has only one of them: the other signature is by a key it does not know
        result = _verify(out, key.public)
        assert result.exit_code == 0, result.stdout
        assert f"is signed by {key.fingerprint};" in result.stdout
    both = _two_keys(tmp_path, old, new)
    pinned = _verify(out, both, "--fingerprint", new.fingerprint, "--json")
    assert json.loads(pinned.stdout)["signer"] == new.fingerprint

    stranger = _verify(out, other_key.public)
    assert stranger.exit_code == ExitCode.VERIFICATION_FAILED
    assert "which is not in the trusted keyring" in stranger.stdout


def test_the_pinned_key_must_be_among_the_good_signers(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    """A good signature by the other key of the file does not count once one key is pinned."""
    manifest = _member(deb_bundle, MANIFEST_NAME)
    resigned = tamper.repack(
        deb_bundle, tmp_path / "other.tar.zst", replace={SIGNATURE_NAME: other_key.sign_detached(manifest)}
    )
    both = _two_keys(tmp_path, operator_key, other_key)
    result = _verify(resigned, both, "--fingerprint", operator_key.fingerprint)
    assert result.exit_code == ExitCode.VERIFICATION_FAILED
    assert (
        f"manifest.json is signed by key {other_key.fingerprint}, which is not in the trusted keyring"
        in result.stdout
    )
    assert _verify(deb_bundle, both, "--fingerprint", operator_key.fingerprint).exit_code == 0  # the control


def test_the_same_sign_key_twice_is_refused(deb_mirror: Path, operator_key: TestKey, tmp_path: Path) -> None:
    result = _build(deb_mirror, tmp_path / "b.tar.zst", operator_key, operator_key)
    assert result.exit_code == ExitCode.USAGE
    assert f"--sign-key names key {operator_key.fingerprint} twice" in result.stderr


def test_the_documented_rotation_installs_with_the_node_command_and_a_key_file_of_both_keys(
    deb_mirror: Path, rotation: tuple[TestKey, TestKey], tmp_path: Path
) -> None:
    """docs/signing.md step 2: gpgv checks both signatures, the node tool trusts the pinned key."""
    old, new = rotation
    out = tmp_path / "rotating.tar.zst"
    assert _build(deb_mirror, out, old, new).exit_code == 0
    node_bin = tmp_path / "bin"  # the node's python3, then its own tools (dpkg too: this one installs)
    node_bin.mkdir()
    (node_bin / "python3").symlink_to(node_python())
    node = Node(tmp_path, node_bin, out, _two_keys(tmp_path, old, new))
    node.env["PATH"] = f"{node_bin}:/usr/sbin:/usr/bin:/sbin:/bin"
    unpinned = node.run_documented("--root", str(node.root))
    assert unpinned.returncode == ExitCode.USAGE and "holds 2 keys" in unpinned.stderr, unpinned.stderr
    done = node.run_documented("--root", str(node.root), "--fingerprint", new.fingerprint)
    assert done.returncode == 0, done.stderr
    assert f"signed by {new.fingerprint};" in done.stdout
    state = load_state(node.root)
    assert state is not None and state.signer == new.fingerprint


def test_push_and_pull_trust_one_key_of_the_file_too(
    deb_bundle: Path,
    operator_key: TestKey,
    other_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    both = _two_keys(tmp_path, operator_key, other_key)
    with Registry(tmp_path / "registry") as registry:
        ref = registry.ref("team/nvct:1")
        refused = run_cli("bundle", "push", str(deb_bundle), ref, "--keyring", str(both))
        assert refused.exit_code == ExitCode.USAGE and "holds 2 keys" in refused.stderr, refused.stderr
        pushed = run_cli(
            "bundle",
            "push",
            str(deb_bundle),
            ref,
            "--keyring",
            str(both),
            "--fingerprint",
            operator_key.fingerprint,
        )
        assert pushed.exit_code == 0, pushed.stderr
        out = tmp_path / "pulled.tar.zst"
        unpinned = run_cli("bundle", "pull", ref, "--output", str(out), "--keyring", str(both))
        assert unpinned.exit_code == ExitCode.USAGE and not out.exists()
        pulled = run_cli(
            "bundle",
            "pull",
            ref,
            "--output",
            str(out),
            "--keyring",
            str(both),
            "--fingerprint",
            operator_key.fingerprint,
        )
        assert pulled.exit_code == 0, pulled.stderr
        assert f"is signed by {operator_key.fingerprint};" in pulled.stdout and "built " in pulled.stdout


FPR_A, FPR_B = "A" * 40, "B" * 40


def _validsig(fpr: str, digest: str) -> tuple[str, list[str]]:
    return ("VALIDSIG", [fpr, "2026-12-04", "1796401479", "0", "4", "0", "22", digest, "00", fpr])


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        # a gpg that refuses SHA-1 itself (newer GnuPG, or --weak-digest SHA1) reports ERRSIG with the algorithm
        ([("ERRSIG", [FPR_A[-16:], "22", "2", "00", "1796401479", "5", FPR_A])], "signed with SHA-1 by key"),
        # ERRSIG for a missing key (rc 9) stays "not in the keyring", whatever its digest
        (
            [("ERRSIG", [FPR_B[-16:], "22", "2", "00", "1796401479", "9", FPR_B])],
            "not in the trusted keyring",
        ),
        ([_validsig(FPR_A, "3")], "signed with RIPEMD-160 by key"),
        ([_validsig(FPR_A, "1")], "signed with MD5 by key"),
        # a weak signature does not count, a strong one by a trusted key does
        ([_validsig(FPR_A, "2"), _validsig(FPR_A, "10")], "ok"),
    ],
)
def test_weak_digests_never_count_whatever_gpg_says(
    status: list[tuple[str, list[str]]], expected: str
) -> None:
    if expected == "ok":
        assert judge_status(status, frozenset({FPR_A}), "x").fingerprint == FPR_A
        return
    with pytest.raises(SignatureError, match=expected):
        judge_status(status, frozenset({FPR_A}), "x")


def test_install_refuses_a_short_key_id_and_a_key_file_of_two_keys_before_touching_the_node(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    root = seed_containerd_node(tmp_path / "root")
    short = run_cli(
        *install_argv(deb_bundle, operator_key, root, "--fingerprint", operator_key.fingerprint[-16:])
    )
    assert short.exit_code == ExitCode.USAGE and "is not a full 40-hex-digit fingerprint" in short.stderr
    assert not (root / "var/lib/gpu-airgap").exists()
    both = _two_keys(tmp_path, operator_key, other_key)
    two = run_cli("install", str(deb_bundle), "--keyring", str(both), "--root", str(root))
    assert two.exit_code == ExitCode.USAGE and "holds 2 keys" in two.stderr, two.stderr
    assert load_state(root) is None
