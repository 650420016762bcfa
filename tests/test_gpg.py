"""plumbing.gpg against real gpg: NVIDIA's real signed files and throwaway keys."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mirror.disk import trust
from mirror.disk.trust import NVIDIA_FINGERPRINT, default_keyring_path
from mirror.errors import MetadataError
from mirror.index.apt import parse_release
from plumbing.errors import ExitCode, SignatureError, UsageError
from plumbing.gpg import Keyring, judge_status
from tests.gpgkeys import NVIDIA_KEY, REAL, TestKey

INRELEASE = (REAL / "stable/deb/amd64/InRelease").read_bytes()
REPOMD = (REAL / "stable/rpm/x86_64/repodata/repomd.xml").read_bytes()
REPOMD_ASC = (REAL / "stable/rpm/x86_64/repodata/repomd.xml.asc").read_bytes()
BODY = "Origin: test\nLabel: test\nSHA512:\n " + "a" * 128 + " 10 Packages\n"


class TestRealNvidiaFiles:
    def test_real_inrelease_verifies_with_the_shipped_key(self, nvidia: Keyring) -> None:
        verified = nvidia.verify_clearsigned(INRELEASE)
        assert verified.fingerprint == NVIDIA_FINGERPRINT
        assert verified.signed_at == datetime(2026, 9, 18, 21, 9, 4, tzinfo=timezone.utc)
        assert verified.text.startswith("Architectures: amd64\nCodename: stable\n")
        assert verified.text.endswith(" 28048 Packages.xz\n")
        assert "PGP" not in verified.text

    def test_real_repomd_detached_signature_verifies(self, nvidia: Keyring) -> None:
        result = nvidia.verify_detached(REPOMD, REPOMD_ASC)
        assert result.fingerprint == NVIDIA_FINGERPRINT
        assert result.signed_at == datetime(2026, 9, 18, 21, 9, 16, tzinfo=timezone.utc)

    def test_one_changed_digit_in_inrelease_is_a_bad_signature(self, nvidia: Keyring) -> None:
        tampered = INRELEASE.replace(b"28048 Packages.xz", b"28049 Packages.xz")
        with pytest.raises(SignatureError, match="bad signature"):
            nvidia.verify_clearsigned(tampered)

    def test_crlf_inrelease_still_verifies_to_the_same_text(self, nvidia: Keyring) -> None:
        crlf = INRELEASE.replace(b"\n", b"\r\n")
        assert nvidia.verify_clearsigned(crlf).text == nvidia.verify_clearsigned(INRELEASE).text

    def test_crlf_repomd_fails_its_binary_detached_signature(self, nvidia: Keyring) -> None:
        with pytest.raises(SignatureError, match="bad signature"):
            nvidia.verify_detached(REPOMD.replace(b"\n", b"\r\n"), REPOMD_ASC)

    def test_trailing_whitespace_added_to_signed_lines_is_dropped_from_the_text(
        self, nvidia: Keyring
    ) -> None:
        padded = INRELEASE.replace(b"Codename: stable\n", b"Codename: stable   \t\n")
        verified = nvidia.verify_clearsigned(padded)
        assert "Codename: stable\n" in verified.text
        assert verified.text == nvidia.verify_clearsigned(INRELEASE).text

    def test_shipped_key_is_pinned_by_fingerprint(self) -> None:
        assert default_keyring_path().read_bytes() == NVIDIA_KEY.read_bytes()
        with Keyring.open([default_keyring_path()], pinned_fingerprint=NVIDIA_FINGERPRINT) as keyring:
            assert keyring.fingerprints == {NVIDIA_FINGERPRINT}

    def test_a_replaced_shipped_key_is_refused_by_the_default_keyring(
        self, test_key: TestKey, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # What mirror sync trusts without --keyring: the package's key file, whatever it now holds.
        monkeypatch.setattr(trust, "default_keyring_path", lambda: test_key.public)
        with pytest.raises(SignatureError) as refused:
            trust.open_keyring()
        assert str(refused.value) == (
            f"the keyring holds key {test_key.fingerprint}, not the pinned key {NVIDIA_FINGERPRINT}; "
            "pass the key you trust explicitly"
        )
        assert refused.value.exit_code == ExitCode.VERIFICATION_FAILED
        # The same key named on purpose (--keyring) is the operator's choice: no pin applies.
        with trust.open_keyring([test_key.public]) as keyring:
            assert keyring.fingerprints == {test_key.fingerprint}


class TestFraming:
    @pytest.mark.parametrize(
        ("mutate", "message"),
        [
            (lambda d: b"Package: evil\n\n" + d, "does not start with a PGP signed-message header"),
            (lambda d: d + b"\nPackage: evil\n", "data after its signature block"),
            (lambda d: d + d, "exactly one signed block"),
            (lambda d: d.split(b"-----BEGIN PGP SIGNATURE-----")[0], "exactly one signed block"),
            (lambda d: b"Architectures: amd64\n", "does not start with a PGP signed-message header"),
            (lambda d: b"", "is empty"),
        ],
        ids=["junk-before", "junk-after", "second-signed-block", "no-signature", "plain-text", "empty"],
    )
    def test_text_outside_the_one_signed_block_is_refused(
        self, nvidia: Keyring, mutate, message: str
    ) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(SignatureError, match=message):
            nvidia.verify_clearsigned(mutate(INRELEASE))

    def test_a_clearsigned_message_is_not_accepted_as_a_detached_signature(self, nvidia: Keyring) -> None:
        with pytest.raises(SignatureError, match="not a detached signature"):
            nvidia.verify_detached(REPOMD, INRELEASE)


class TestThrowawayKeys:
    def test_clearsign_round_trip_returns_the_signed_text(self, test_key: TestKey, trusting: Keyring) -> None:
        text = BODY + "- dash line\n-----BEGIN PGP SIGNATURE----- inside\n"
        signed = test_key.clearsign(text)
        verified = trusting.verify_clearsigned(signed)
        assert verified.text == text
        assert verified.fingerprint == test_key.fingerprint
        assert verified.signed_at is not None

    def test_signed_text_that_is_not_utf8_is_refused(self, test_key: TestKey, trusting: Keyring) -> None:
        gpg = ["gpg", "--homedir", str(test_key.home), "--batch", "--clearsign", "-u", test_key.fingerprint]
        signed = subprocess.run(gpg, input=b"Origin: \xff\xfe\n", check=True, capture_output=True).stdout
        with pytest.raises(SignatureError, match="is not UTF-8"):
            trusting.verify_clearsigned(signed)

    def test_signature_by_another_key_names_that_key(self, other_key: TestKey, nvidia: Keyring) -> None:
        signed = other_key.clearsign(BODY)
        with pytest.raises(
            SignatureError,
            match=f"signed by key {other_key.fingerprint}, which is not in the trusted keyring",
        ):
            nvidia.verify_clearsigned(signed)

    def test_detached_signature_by_another_key_is_refused(
        self, other_key: TestKey, trusting: Keyring
    ) -> None:
        signature = other_key.sign_detached(REPOMD)
        with pytest.raises(SignatureError, match="not in the trusted keyring"):
            trusting.verify_detached(REPOMD, signature)

    def test_detached_signature_round_trip_and_tamper(self, test_key: TestKey, trusting: Keyring) -> None:
        signature = test_key.sign_detached(REPOMD)
        assert signature.startswith(b"-----BEGIN PGP SIGNATURE-----")
        assert trusting.verify_detached(REPOMD, signature).fingerprint == test_key.fingerprint
        with pytest.raises(SignatureError, match="bad signature"):
            trusting.verify_detached(REPOMD + b" ", signature)

    def test_empty_signed_body_verifies_but_is_not_a_release(
        self, test_key: TestKey, trusting: Keyring
    ) -> None:
        signed = test_key.clearsign("")
        text = trusting.verify_clearsigned(signed).text
        assert text.strip() == ""
        with pytest.raises(
            MetadataError, match="is empty; refusing to treat it as a repository with no packages"
        ):
            parse_release(text)

    def test_second_signature_by_unknown_key_does_not_hide_the_trusted_one(
        self, test_key: TestKey, other_key: TestKey, trusting: Keyring, tmp_path: Path
    ) -> None:
        # Both secret keys in one home, one message with two signatures.
        home = tmp_path / "both"
        home.mkdir(mode=0o700)
        for key in (test_key, other_key):
            secret = subprocess.run(
                ["gpg", "--homedir", str(key.home), "--batch", "--export-secret-keys", key.fingerprint],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(
                ["gpg", "--homedir", str(home), "--batch", "--import"],
                input=secret,
                check=True,
                capture_output=True,
            )
        signed = subprocess.run(
            [
                "gpg",
                "--homedir",
                str(home),
                "--batch",
                "--clearsign",
                "-u",
                other_key.fingerprint,
                "-u",
                test_key.fingerprint,
            ],
            input=BODY.encode(),
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
        verified = trusting.verify_clearsigned(signed)
        assert verified.fingerprint == test_key.fingerprint
        assert verified.text == BODY

    def test_pinned_fingerprint_mismatch_is_refused(self, test_key: TestKey) -> None:
        with pytest.raises(
            SignatureError, match=f"holds key {test_key.fingerprint}, not the pinned key {NVIDIA_FINGERPRINT}"
        ):
            Keyring.open([test_key.public], pinned_fingerprint=NVIDIA_FINGERPRINT)

    def test_keyring_file_without_a_key_is_refused(self, tmp_path: Path) -> None:
        junk = tmp_path / "junk.asc"
        junk.write_text("not a key\n")
        with pytest.raises(UsageError) as refused:
            Keyring.open([junk])
        assert (
            str(refused.value) == f"the key file {junk} holds no OpenPGP public key (gpg --export KEY > FILE)"
        )

    def test_binary_keyring_file_works(self, test_key: TestKey, tmp_path: Path) -> None:
        binary = test_key.export_binary(tmp_path / "key.gpg")
        with Keyring.open([binary]) as keyring:
            assert keyring.fingerprints == {test_key.fingerprint}

    def test_temporary_home_is_removed_on_exit_and_no_agent_outlives_it(self, test_key: TestKey) -> None:
        with Keyring.open([test_key.public]) as keyring:
            home = keyring._home
            keyring.verify_detached(REPOMD, test_key.sign_detached(REPOMD))
            assert home.is_dir()
        assert not home.exists()
        agents = subprocess.run(
            ["pgrep", "-f", f"gpg-agent --homedir {home}"], capture_output=True, text=True
        )
        assert agents.stdout == ""


STATUS_CASES = [
    (
        "good",
        [
            ("NEWSIG", []),
            ("GOODSIG", ["K", "u"]),
            ("VALIDSIG", ["S", "2026-01-01", "1767225600"] + ["x"] * 6 + ["P"]),
        ],
        "P",
    ),
    (
        "bad-beside-good",
        [("VALIDSIG", ["S", "d", "1"] + ["x"] * 6 + ["P"]), ("BADSIG", ["K2", "u"])],
        "bad signature",
    ),
    (
        "expired-key",
        [("EXPKEYSIG", ["K", "u"]), ("VALIDSIG", ["S", "d", "1"] + ["x"] * 6 + ["P"])],
        "expired key",
    ),
    ("revoked-key", [("REVKEYSIG", ["K", "u"])], "revoked key"),
    ("untrusted-valid", [("VALIDSIG", ["S", "d", "1"] + ["x"] * 6 + ["Q"])], "signed by key Q"),
    (
        "unknown-key",
        [("NEWSIG", []), ("ERRSIG", ["ABCD", "1", "10", "01", "0", "9"]), ("NO_PUBKEY", ["ABCD"])],
        "signed by key ABCD",
    ),
    ("nothing", [], "carries no OpenPGP signature"),
]


@pytest.mark.parametrize(("name", "status", "expected"), STATUS_CASES, ids=[c[0] for c in STATUS_CASES])
def test_status_policy(name: str, status: list[tuple[str, list[str]]], expected: str) -> None:
    if name == "good":
        result = judge_status(status, frozenset({"P"}), "x")
        assert result.fingerprint == expected
        assert result.signed_at == datetime(2026, 1, 1, tzinfo=timezone.utc)
    else:
        with pytest.raises(SignatureError, match=expected):
            judge_status(status, frozenset({"P"}), "x")
