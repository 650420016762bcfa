"""``mirror publish --rollback`` signs the kept tree's apt indexes again before serving it.

apt keeps the indexes it has when a repository's InRelease is dated before the one it read last
(tests/test_snapshots.py shows apt reading a rollback); these tests pin down what the rollback does
to the kept tree, and that a rollback that cannot sign it again changes nothing.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest

from mirror.publish.redate import release_dated
from mirror.publish.swap import previous
from plumbing.errors import ToolError
from plumbing.gpg import Keyring
from tests.cli_runner import CliResult, run_cli
from tests.gpgkeys import TestKey
from tests.test_publish import publish, tree_digest

URL = "http://mirror.internal/nvct"
INRELEASE = "stable/deb/amd64/InRelease"
DAY = 86400


def _publish_twice(mirror: Path, out: Path, key: TestKey, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish dated a day ago, then one dated now: the first is kept for --rollback."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(int(time.time()) - DAY))
    assert publish(mirror, out, URL, key=key).exit_code == 0
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert publish(mirror, out, "http://other.internal/nvct", key=key).exit_code == 0


def _rollback(out: Path, *args: str) -> CliResult:
    return run_cli("mirror", "publish", "--rollback", "--output", str(out), *args)


def _date(text: str) -> int:
    line = next(line for line in text.splitlines() if line.startswith("Date: "))
    return int(parsedate_to_datetime(line[len("Date: ") :]).timestamp())


def test_a_rollback_signs_the_kept_indexes_again_dated_now_by_the_key_that_published_them(
    deb_mirror: Path, past_key: TestKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    _publish_twice(deb_mirror, out, past_key, monkeypatch)
    kept = previous(out)
    kept_release = (kept / INRELEASE).read_bytes()
    kept_packages = (kept / "stable/deb/amd64/Packages").read_bytes()
    started = int(time.time())
    result = _rollback(out, "--gnupghome", str(past_key.home))
    assert result.exit_code == 0, result.stderr
    assert "the live mirror" in result.stdout
    with Keyring.open([past_key.public], pinned_fingerprint=past_key.fingerprint) as ring:
        before = ring.verify_clearsigned(kept_release).text
        served = ring.verify_clearsigned((out / INRELEASE).read_bytes())
    assert _date(before) < started - DAY / 2  # the kept tree was dated a day ago ...
    assert started <= _date(served.text) <= time.time()  # ... and is served dated now
    assert served.text == release_dated(before, _date(served.text))  # nothing but the Date changed
    assert served.fingerprint == past_key.fingerprint
    assert (out / "stable/deb/amd64/Packages").read_bytes() == kept_packages
    assert f"{URL}/stable/deb" in (out / "stable/deb/nvidia-container-toolkit.list").read_text()


@pytest.mark.parametrize("case", ["key-not-at-hand", "another-key", "edited-index"])
def test_a_rollback_that_cannot_sign_the_kept_indexes_again_swaps_nothing_and_says_why(
    deb_mirror: Path,
    past_key: TestKey,
    other_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    out = tmp_path / "out"
    _publish_twice(deb_mirror, out, past_key, monkeypatch)
    kept_index = previous(out) / INRELEASE
    args, code, reason = {
        "key-not-at-hand": (
            ["--gnupghome", str(other_key.home)],
            2,
            f"signed again by the key that signed them, {past_key.fingerprint}, which is not a secret "
            f"key in {other_key.home}",
        ),
        "another-key": (
            ["--gnupghome", str(other_key.home), "--sign-key", other_key.fingerprint],
            2,
            f"is key {other_key.fingerprint}, but the kept tree of {out} was published with "
            f"{past_key.fingerprint}",
        ),
        "edited-index": (
            ["--gnupghome", str(past_key.home)],
            3,
            f"{kept_index} has a bad signature",
        ),
    }[case]
    if (
        case == "edited-index"
    ):  # someone changed the kept tree: a rollback must not bless it with a new signature
        edited = kept_index.read_bytes().replace(b"Components: main", b"Components: evil")
        kept_index.unlink()
        kept_index.write_bytes(edited)
    served, kept = tree_digest(out), tree_digest(previous(out))
    result = _rollback(out, *args)
    assert result.exit_code == code and reason in result.stderr, result.stderr
    assert tree_digest(out) == served and tree_digest(previous(out)) == kept


def test_release_dated_changes_exactly_the_date_field() -> None:
    text = "Origin: gpu-airgap\nDate: Thu, 01 Jan 2026 00:00:00 +0000\nArchitectures: amd64\n"
    assert (
        release_dated(text, 0)
        == "Origin: gpu-airgap\nDate: Thu, 01 Jan 1970 00:00:00 +0000\nArchitectures: amd64\n"
    )
    with pytest.raises(ToolError, match="has 0 Date fields"):
        release_dated("Origin: gpu-airgap\nValid-Until: x\n", 0)
