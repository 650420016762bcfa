"""Issue 24 item 5: a validly signed but older upstream index (a replay, a freeze, a withdrawn release).

The loopback upstream serves a copy of the test site; "older" indexes are made from it and signed
with the same upstream key, as a replaying mirror in the middle would serve them (NVIDIA's own
InRelease keeps a frozen Date and no Valid-Until, so the release the index stops listing is what
gives a replay away there). Each refusal is asserted by its sentence and exit code, with the
mirror byte-for-byte unchanged; ``--allow-older-index`` keeps every held release buildable.
"""

from __future__ import annotations

import json
import lzma
import re
import subprocess
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from mirror.sync import freshness
from tests.cli_runner import run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.upstream import UpstreamServer, UpstreamTree, copy_upstream, resign_repomd, sign_clear
from tests.upstream.debs import release_body

NEWEST, OLDER = "1.20.1-1", "1.18.0-1"
REPO = "stable/deb/amd64"


class Site:
    """A private copy of the upstream, served on 127.0.0.1, whose deb index a test rewrites."""

    def __init__(self, tree: UpstreamTree, server: UpstreamServer) -> None:
        self.tree, self.server = tree, server
        self.deb = tree.root / REPO
        self.packages = (self.deb / "Packages").read_bytes()

    def publish(self, *, drop_version: str | None = None, fields: dict[str, str] | None = None) -> None:
        """Rewrite Packages(.xz) and InRelease, signed with the upstream key: without ``drop_version``'s
        stanzas, and with ``fields`` (Date, Valid-Until) replaced or added."""
        stanzas = self.packages.decode().split("\n\n")
        if drop_version is not None:
            stanzas = [s for s in stanzas if f"\nVersion: {drop_version}\n" not in f"\n{s}\n"]
        packages = "\n\n".join(stanzas).encode()
        xz = lzma.compress(packages, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64)
        (self.deb / "Packages").write_bytes(packages)
        (self.deb / "Packages.xz").write_bytes(xz)
        body = release_body(
            arch="amd64", channel="stable", files={"Packages": packages, "Packages.xz": xz}
        ).decode()
        for name, value in (fields or {}).items():
            line = f"{name}: {value}"
            body = (
                re.sub(rf"^{name}: .*$", line, body, flags=re.M)
                if f"\n{name}: " in f"\n{body}"
                else line + "\n" + body
            )
        (self.deb / "InRelease").write_bytes(sign_clear(self.tree, body.encode()))

    def sync(self, dest: Path, *extra: str, fmt: str = "deb") -> tuple[int, str]:
        result = run_mirror_sync(
            dest, self.server.url, self.tree.public_key, "--quiet", *extra, version=None, fmt=fmt
        )
        return result.exit_code, result.stderr


@pytest.fixture()
def site(upstream_tree: UpstreamTree, tmp_path: Path) -> Iterator[Site]:
    tree = copy_upstream(upstream_tree, tmp_path / "site")
    with UpstreamServer(tree.root) as server:
        yield Site(tree, server)


def _tree(dest: Path) -> dict[str, bytes]:
    """Every file of the mirror (the lock file aside), to show a refusal changed nothing."""
    return {
        str(p.relative_to(dest)): p.read_bytes()
        for p in sorted(dest.rglob("*"))
        if p.is_file() and p.name != ".gpu-airgap.lock"
    }


def _refused(site: Site, dest: Path, sentence: str, *extra: str) -> None:
    before = _tree(dest)
    code, stderr = site.sync(dest, *extra)
    assert code == 3, stderr
    assert sentence in stderr and "the mirror is unchanged" in stderr and "Traceback" not in stderr, stderr
    assert _tree(dest) == before


def _releases(dest: Path) -> list[str]:
    state = json.loads((dest / ".gpu-airgap/state.json").read_text())
    (repo,) = [r for r in state["repos"] if r["key"] == REPO]
    return [r["toolkit_version"] for r in repo["releases"]]


def test_a_replayed_index_that_no_longer_lists_the_held_release_is_refused(
    site: Site, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    assert site.sync(dest)[0] == 0 and _releases(dest) == [NEWEST]
    site.publish(drop_version=NEWEST)  # NVIDIA's frozen Date, no Valid-Until: only the content tells
    _refused(
        site,
        dest,
        f"the signed {site.server.url}/stable/deb/amd64/InRelease no longer lists release {NEWEST} that the "
        "mirror holds",
    )
    verified = run_cli("mirror", "verify", "--mirror", str(dest))
    assert verified.exit_code == 0, verified.stdout + verified.stderr


def test_an_index_whose_date_goes_backwards_is_refused(site: Site, tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    site.publish(fields={"Date": "Mon, 01 Jan 2024 00:00:00 UTC"})
    assert site.sync(dest)[0] == 0
    site.publish(fields={"Date": "Sun, 01 Jan 2023 00:00:00 UTC"})  # same packages, dated a year earlier
    _refused(
        site,
        dest,
        "InRelease is older than the one the mirror holds (Date 2023-01-01T00:00:00+00:00, the mirror's "
        "2024-01-01T00:00:00+00:00): a replayed or frozen index",
    )
    site.publish(fields={"Date": "Tue, 02 Jan 2024 00:00:00 UTC"})  # a newer one is taken
    assert site.sync(dest)[0] == 0


def test_an_expired_index_is_refused_unless_allowed(site: Site, tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    dest.mkdir()
    site.publish(fields={"Valid-Until": "Wed, 01 Jan 2020 00:00:00 UTC"})
    _refused(site, dest, "InRelease expired on 2020-01-01T00:00:00+00:00 (its Valid-Until)")
    assert _tree(dest) == {}
    code, stderr = site.sync(dest, "--allow-older-index")
    assert code == 0, stderr


def test_an_index_dated_ahead_of_this_hosts_clock_is_refused(site: Site, tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    dest.mkdir()
    site.publish(fields={"Date": "Fri, 01 Jan 2099 00:00:00 UTC"})
    _refused(
        site,
        dest,
        "InRelease is dated 2099-01-01T00:00:00+00:00, ahead of this host's clock",
        "--allow-older-index",  # not an older index: the flag does not accept it
    )
    assert "check this host's clock" in site.sync(dest)[1]


def test_allow_older_index_keeps_the_held_release_buildable_and_verify_checks_state_and_index_agree(
    site: Site, operator_key: TestKey, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    assert site.sync(dest)[0] == 0
    site.publish(drop_version=NEWEST)
    accepted = run_mirror_sync(
        dest, site.server.url, site.tree.public_key, "--allow-older-index", "--json", version=None
    )
    assert accepted.exit_code == 0, accepted.stderr
    assert f"no longer lists {NEWEST}; the mirror kept the index it replaced" in accepted.stderr
    assert json.loads(accepted.stdout)["targets"][0]["no_longer_listed"] == [NEWEST]
    assert _releases(dest) == [OLDER, NEWEST]
    verified = run_cli("mirror", "verify", "--mirror", str(dest))
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    built = run_bundle_build(
        dest, operator_key, tmp_path / "newest.tar", "--json", version=NEWEST.split("-")[0]
    )
    assert built.exit_code == 0, built.stderr
    manifest = json.loads(run_cli("bundle", "inspect", str(tmp_path / "newest.tar"), "--json").stdout)
    (target,) = manifest["targets"]
    assert target["toolkit_version"] == NEWEST
    signed = [
        f["path"] for f in target["provenance"]["signed_files"]
    ]  # the index that lists it: the kept one
    assert signed and all(path.startswith(f"{REPO}/.retained/") for path in signed), signed

    again, stderr = site.sync(dest)  # accepted once: the next sync from the same upstream needs no flag
    assert again == 0 and "no longer lists" not in stderr, stderr
    (repo,) = [
        r for r in json.loads((dest / ".gpu-airgap/state.json").read_text())["repos"] if r["key"] == REPO
    ]
    assert len(repo["retained"]) == 1  # and keeps one copy of the index it replaced

    # A mirror an older gpu-airgap left in that state (the old index, no kept copy): verify says so,
    # and prune --keep 1 keeps the release it can still build beside the newest.
    state_file = dest / ".gpu-airgap/state.json"
    state = json.loads(state_file.read_text())
    for repo in state["repos"]:
        repo["retained"] = []
    state_file.write_text(json.dumps(state))
    broken = run_cli("mirror", "verify", "--mirror", str(dest))
    assert broken.exit_code == 9
    assert (
        f"{REPO}: the state lists release {NEWEST}, but the mirror's signed index does not list"
        in broken.stderr
    ), broken.stderr
    stuck = run_bundle_build(dest, operator_key, tmp_path / "stuck.tar", version=NEWEST.split("-")[0])
    assert (
        stuck.exit_code != 0
        and "sync again from an upstream that lists it, or build another --version" in (stuck.stderr)
    ), stuck.stderr
    pruned = run_cli("mirror", "prune", "--mirror", str(dest), "--keep", "1")
    assert pruned.exit_code == 0, pruned.stderr
    assert _releases(dest) == [OLDER, NEWEST]


def test_a_yum_index_whose_timestamps_go_backwards_is_refused(site: Site, tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    rpm = site.tree.root / "stable/rpm/x86_64"
    repomd = rpm / "repodata/repomd.xml"
    original = repomd.read_bytes()
    newer = re.sub(
        rb"<timestamp>(\d+)</timestamp>",
        lambda m: b"<timestamp>%d</timestamp>" % (int(m[1]) + 3600),
        original,
    )
    repomd.write_bytes(newer)
    resign_repomd(site.tree, rpm)
    assert site.sync(dest, fmt="rpm")[0] == 0
    repomd.write_bytes(original)  # the repomd before: its revision (1.0) never changes, its timestamps do
    resign_repomd(site.tree, rpm)
    before = _tree(dest)
    code, stderr = site.sync(dest, fmt="rpm")
    assert code == 3 and "repodata/repomd.xml is older than the one the mirror holds (timestamp " in stderr, (
        stderr
    )
    assert _tree(dest) == before


def _retained(dest: Path) -> list[dict[str, object]]:
    (repo,) = [
        r for r in json.loads((dest / ".gpu-airgap/state.json").read_text())["repos"] if r["key"] == REPO
    ]
    return list(repo["retained"])


def test_prune_keeps_the_index_a_kept_release_needs_and_removes_it_once_none_does(
    site: Site, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    assert site.sync(dest)[0] == 0
    site.publish(drop_version=NEWEST)
    assert site.sync(dest, "--allow-older-index")[0] == 0
    assert run_cli("mirror", "prune", "--mirror", str(dest), "--keep", "1").exit_code == 0
    assert _releases(dest) == [NEWEST] and len(_retained(dest)) == 1  # only the kept index lists it
    assert run_cli("mirror", "verify", "--mirror", str(dest)).exit_code == 0

    site.publish()  # upstream lists it again: the kept index is no longer needed
    assert site.sync(dest)[0] == 0
    pruned = run_cli("mirror", "prune", "--mirror", str(dest), "--keep", "1")
    assert pruned.exit_code == 0, pruned.stderr
    assert _retained(dest) == [] and list((dest / REPO / ".retained").iterdir()) == []
    assert run_cli("mirror", "verify", "--mirror", str(dest)).exit_code == 0


def test_an_index_signed_before_the_mirrors_is_refused_even_with_the_same_frozen_date(
    site: Site, tmp_path: Path
) -> None:
    # NVIDIA's Date never moves, but each publication is signed anew: a frozen copy signed earlier
    # (hiding a newer release from a mirror that holds only older ones) gives itself away by its signature.
    key = site.tree.signing_key
    listing = subprocess.run(
        ["gpg", "--homedir", str(key.gnupghome), "--with-colons", "--list-keys", key.fingerprint],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    created = int(next(line.split(":")[5] for line in listing.splitlines() if line.startswith("pub:")))
    body = (site.deb / "InRelease").read_bytes().split(b"\n\n", 1)[1].split(b"-----BEGIN PGP SIGNATURE", 1)[0]
    frozen = subprocess.run(
        [
            "gpg",
            "--homedir",
            str(key.gnupghome),
            "--batch",
            "--yes",
            "--quiet",
            "--faked-system-time",
            f"{created + 1}!",
            "--local-user",
            key.fingerprint,
            "--digest-algo",
            "SHA512",
            "--clearsign",
        ],
        input=body,
        capture_output=True,
        check=True,
    ).stdout
    site.publish()  # signed now
    dest = tmp_path / "mirror"
    assert site.sync(dest)[0] == 0
    (site.deb / "InRelease").write_bytes(frozen)  # the same content, signed at the key's first second
    before = _tree(dest)
    code, stderr = site.sync(dest)
    assert code == 3 and "InRelease is older than the one the mirror holds (signature " in stderr, stderr
    assert _tree(dest) == before


def test_an_index_dated_within_the_clock_skew_tolerance_is_taken_and_beyond_it_refused() -> None:
    now = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)  # injected: the host's clock
    what = "the signed http://127.0.0.1/stable/deb/amd64/InRelease"
    for ahead, refused in (
        (freshness.CLOCK_SKEW - timedelta(seconds=1), False),
        (freshness.CLOCK_SKEW + timedelta(seconds=1), True),
    ):
        dates = freshness.IndexDates(now + ahead, None, None)
        if refused:
            with pytest.raises(freshness.StaleIndex, match="ahead of this host's clock"):
                freshness.check_current(dates, now=now, what=what, allow_older=False)
        else:
            freshness.check_current(dates, now=now, what=what, allow_older=False)
    expired = freshness.IndexDates(None, now - timedelta(seconds=1), None)
    with pytest.raises(
        freshness.StaleIndex, match=r"expired on 2026-12-04T11:59:59\+00:00 \(its Valid-Until\)"
    ) as refusal:
        freshness.check_current(expired, now=now, what=what, allow_older=False)
    assert refusal.value.exit_code == 3
    freshness.check_current(expired, now=now, what=what, allow_older=True)
    freshness.check_current(
        freshness.IndexDates(None, now + timedelta(seconds=1), None), now=now, what=what, allow_older=False
    )
