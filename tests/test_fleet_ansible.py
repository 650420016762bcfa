"""Issue 9: the Ansible role rolls a real signed bundle out to a fleet with the real ``ansible-playbook``.

Three hosts (``node1..node3``; two where batches are not what a test is about) use the local
connection, each mapped to its own scratch node root
(``gpu_airgap_root``) with a real dpkg database and a containerd config. The bundle is built with
``mirror sync`` + ``bundle build`` (zstd); the role copies it, takes the node tool out of it on the
controller, and runs the installer on every host. One module-scoped sequence of playbook runs
(check, install, re-run, check after drift, uninstall) keeps ansible's start-up cost down; the
tests then assert on what each run did. Ansible is hermetic: its config, temp dirs and HOME are
under tmp, and a small callback (tests/data/ansible_callbacks) records every result as JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from installer.nodecheck import NODE_SUMS, NODE_SUMS_SIGNATURE, NODE_TOOL
from mirror.publish.files import Site, render_list, render_pref, render_repo
from tests import bundle_tamper as tamper
from tests.ansible_play import Play, run_playbook
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey, make_key
from tests.node_fixtures import (
    CONTAINERD_CONFIG,
    TOOLKIT,
    dpkg_versions,
    node_python,
    seed_containerd_node,
    tree_digest,
)
from tests.upstream import UpstreamServer, stop_agent

pytestmark = pytest.mark.slow

ANSIBLE_DIR = Path(__file__).resolve().parents[1] / "deploy" / "ansible"
HOSTS = ("node1", "node2", "node3")
#: a canary and one more: enough for what each node does on its own and for "the canary failed, the
#: other node stays untouched"; the batches need all three (a play costs about 0.2 s of CPU per task
#: and host, so a third node makes these plays half as costly again)
TWO_HOSTS = HOSTS[:2]
CONTAINERD = "etc/containerd/config.toml"
#: a canary, then the rest: the same stop-after-a-bad-batch behaviour as the default, in fewer batches
FAST_SERIAL = json.dumps({"gpu_airgap_serial": [1, "100%"]})


@dataclass
class Fleet:
    """Scratch node roots plus a hermetic ansible set-up that reaches them."""

    tmp: Path
    bundle: Path
    keyring: Path
    hosts: Tuple[str, ...] = HOSTS
    roots: Dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for host in self.hosts:
            root = self.tmp / host
            seed_containerd_node(root)
            self.roots[host] = root
        lines = ["[gpu_nodes]"] + [f"{h} gpu_airgap_root={self.roots[h]}" for h in self.hosts]
        lines += [
            "[gpu_nodes:vars]",
            "ansible_connection=local",
            "ansible_become=false",
            "ansible_python_interpreter=/usr/bin/python3",
            f"gpu_airgap_python={node_python()}",
            "gpu_airgap_runtime=containerd",
            "gpu_airgap_cdi=off",
        ]
        (self.tmp / "inventory.ini").write_text("\n".join(lines) + "\n")

    def play(
        self,
        playbook: str,
        *args: str,
        bundle: Path | None = None,
        serial: str = FAST_SERIAL,
        tmpdir: Path | None = None,
    ) -> Play:
        """Run ``ansible-playbook -i inventory PLAYBOOK ARGS...`` against the fleet.

        ``serial`` overrides the playbooks' batches (``""``: keep their default, [1, '25%']);
        ``tmpdir`` is the nodes' (local) TMPDIR, where modules like tempfile make their directories.
        """
        home = self.tmp / "home"
        env = {
            "ANSIBLE_REMOTE_TEMP": str(home / "remote-tmp"),
            "ANSIBLE_FORKS": "3",
            **({"TMPDIR": str(tmpdir)} if tmpdir else {}),
        }
        argv = [
            "-i",
            str(self.tmp / "inventory.ini"),
            str(ANSIBLE_DIR / playbook),
            "-e",
            f"gpu_airgap_bundle={bundle or self.bundle}",
            "-e",
            f"gpu_airgap_keyring={self.keyring}",
            *(["-e", serial] if serial else []),
            *args,
        ]
        return run_playbook(self.tmp, argv, env=env, timeout=300)

    def digests(self) -> Dict[str, Dict[str, str]]:
        """Every root's tree (paths, modes, content hashes)."""
        return {host: tree_digest(root) for host, root in self.roots.items()}


def _runtime(root: Path) -> str:
    report = run_cli("configure", "report", "--root", str(root), "--runtime", "containerd", "--json")
    return str(json.loads(report.stdout).get("runtime") or "")


@pytest.fixture(scope="module")
def bundle(deb_bundle: Path) -> Path:
    """The signed zstd bundle every host gets (see conftest ``deb_bundle``)."""
    return deb_bundle


@dataclass
class Rollout:
    """What each run of the module's sequence did, with the roots' trees around it."""

    fleet: Fleet
    before: Dict[str, Dict[str, str]]
    check_fresh: Play
    after_check_fresh: Dict[str, Dict[str, str]]
    first: Play
    reports: Path  #: the first run's gpu_airgap_report_dir
    installed: Dict[str, Dict[str, str]]  #: per host, the toolkit packages dpkg has after the first run
    runtimes: Dict[str, str]  #: per host, the runtime containerd's config registers after the first run
    second: Play
    after_second: Dict[str, Dict[str, str]]
    check_drift: Play
    after_check_drift: Dict[str, Dict[str, str]]
    uninstall: Play
    uninstall_again: Play


@pytest.fixture(scope="module")
def rollout(bundle: Path, operator_key: TestKey, tmp_path_factory: pytest.TempPathFactory) -> Rollout:
    """check -> install -> install again -> check after a drifted config -> uninstall -> uninstall again."""
    fleet = Fleet(tmp_path_factory.mktemp("fleet"), bundle, operator_key.public)
    before = fleet.digests()
    check_fresh = fleet.play("site.yml", "--check", "--diff")
    after_check_fresh = fleet.digests()
    reports = fleet.tmp / "reports"
    first = fleet.play(
        "site.yml", "-e", f"gpu_airgap_report_dir={reports}", serial=""
    )  # the playbook's own batches
    installed = {host: dpkg_versions(root) for host, root in fleet.roots.items()}
    runtimes = {host: _runtime(root) for host, root in fleet.roots.items()}
    second = fleet.play("site.yml")
    after_second = fleet.digests()
    # node3's containerd config goes back to the original: a --check run must spot it and show the diff.
    written = (fleet.roots["node3"] / CONTAINERD).read_bytes()
    (fleet.roots["node3"] / CONTAINERD).write_bytes(CONTAINERD_CONFIG)
    drifted = fleet.digests()
    check_drift = fleet.play("site.yml", "--check", "--diff")
    after_check_drift = fleet.digests()
    assert after_check_drift == drifted, "--check changed a root"
    (fleet.roots["node3"] / CONTAINERD).write_bytes(written)
    uninstall = fleet.play("uninstall.yml")
    uninstall_again = fleet.play("uninstall.yml")
    return Rollout(
        fleet,
        before,
        check_fresh,
        after_check_fresh,
        first,
        reports,
        installed,
        runtimes,
        second,
        after_second,
        check_drift,
        after_check_drift,
        uninstall,
        uninstall_again,
    )


def test_check_mode_on_fresh_nodes_reports_changes_and_changes_nothing(rollout: Rollout) -> None:
    play = rollout.check_fresh
    assert play.returncode == 0, play.output
    assert set(play.changed()) == set(HOSTS) and all(play.changed().values()), play.stats
    assert rollout.after_check_fresh == rollout.before
    for host in HOSTS:
        assert play.task(host, "Install the toolkit from the bundle")["result"]["changed"] is True


def test_playbook_installs_the_four_packages_and_configures_containerd_on_every_root(
    rollout: Rollout,
) -> None:
    play = rollout.first
    assert play.returncode == 0, play.output
    assert all(play.changed()[h] > 0 for h in HOSTS), play.stats
    inspected = json.loads(run_cli("bundle", "inspect", str(rollout.fleet.bundle), "--json").stdout)
    (target,) = inspected["targets"]
    expected = {p["name"]: p["version"] for p in target["packages"]}
    assert sorted(expected) == sorted(TOOLKIT)
    for host in HOSTS:
        assert rollout.installed[host] == expected, host
        assert rollout.runtimes[host] == "nvidia", host
        result = play.task(host, "Install the toolkit from the bundle")["result"]
        assert result["result"]["outcome"] == "installed"
        assert result["result"]["engines"]["containerd"].startswith("registered runtime")
        assert result["engines_changed"] == []  # under a scratch root nothing waits for a restart
        report = json.loads((rollout.reports / f"{host}.json").read_text())  # collected on the controller
        assert report["packages"] == expected and report["changed"] is True, report
        # the handler is notified but skips: there is no engine of ours to restart under a scratch root
        restart = play.task(host, "Restart the changed container engines")
        assert restart["status"] == "skipped", restart
    assert "did not come back" not in play.output


def test_rollout_goes_in_batches_starting_with_one_canary(rollout: Rollout) -> None:
    # the default serial [1, '25%'] of three hosts: node1 alone, then one per batch
    assert _batches(rollout.first.output) == [{"node1"}, {"node2"}, {"node3"}]
    # -e gpu_airgap_serial=[1, "100%"]: the canary, then the other two together
    assert _batches(rollout.second.output) == [{"node1"}, {"node2", "node3"}]


def _batches(output: str) -> List[Set[str]]:
    """The hosts each batch ran on: ansible prints one PLAY section per batch, before the recap."""
    header = "PLAY [Install the NVIDIA Container Toolkit with gpu-airgap]"
    sections = output.split("PLAY RECAP")[0].split(header)[1:]
    return [{host for host in HOSTS if f"[{host}]" in section} for section in sections]


def test_second_run_reports_no_change_on_any_host(rollout: Rollout) -> None:
    play = rollout.second
    assert play.returncode == 0, play.output
    assert play.changed() == dict.fromkeys(HOSTS, 0), play.stats
    for host in HOSTS:
        assert (
            play.task(host, "Install the toolkit from the bundle")["result"]["result"]["outcome"]
            == "up-to-date"
        )


def test_check_mode_spots_a_drifted_config_shows_its_diff_and_changes_nothing(rollout: Rollout) -> None:
    play = rollout.check_drift
    assert play.returncode == 0, play.output
    assert play.changed() == {"node1": 0, "node2": 0, "node3": 1}, play.stats
    task = play.task("node3", "Install the toolkit from the bundle")["result"]
    assert task["result"]["engines"]["containerd"] == "would register" and task["engines_changed"] == []
    assert "+" in task["diff"]["prepared"] and "runtimes.nvidia" in task["diff"]["prepared"]
    assert "runtimes.nvidia" in play.output  # --diff printed it


def test_uninstall_playbook_restores_every_root(rollout: Rollout) -> None:
    play = rollout.uninstall
    assert play.returncode == 0, play.output
    for host, root in rollout.fleet.roots.items():
        assert dpkg_versions(root) == {}, host
        assert (root / CONTAINERD).read_bytes() == CONTAINERD_CONFIG, host
        assert not (root / "var/cache/gpu-airgap/fleet").exists(), host
    assert rollout.uninstall_again.returncode == 0, rollout.uninstall_again.output
    assert rollout.uninstall_again.changed() == dict.fromkeys(HOSTS, 0), rollout.uninstall_again.stats


def _tampered_copy(bundle: Path, out: Path) -> Path:
    """``bundle`` as an uncompressed tar with one byte of a package flipped (same size, wrong sha256)."""
    plain = out / "plain.tar"
    with plain.open("wb") as sink:
        subprocess.run(["zstd", "-dc", str(bundle)], stdout=sink, check=True)
    with tarfile.open(plain) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".deb"))
        offset = member.offset_data + member.size // 2
    raw = bytearray(plain.read_bytes())
    raw[offset] ^= 0xFF
    tampered = out / "tampered.tar"
    tampered.write_bytes(bytes(raw))
    plain.unlink()
    return tampered


def test_tampered_bundle_fails_on_the_first_batch_and_leaves_the_other_roots_untouched(
    bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    fleet = Fleet(tmp_path / "fleet", bundle, operator_key.public)
    before = fleet.digests()
    play = fleet.play("site.yml", bundle=_tampered_copy(bundle, tmp_path))
    assert play.returncode != 0
    assert set(play.stats) == {"node1"} and play.stats["node1"]["failures"] == 1, play.stats
    failed = play.task("node1", "Install the toolkit from the bundle")
    assert failed["status"] == "failed" and "does not match" in failed["result"]["msg"], failed
    after = fleet.digests()
    assert after["node2"] == before["node2"] and after["node3"] == before["node3"]
    # node1 got the bundle in its cache; nothing else under its root changed
    assert {k: v for k, v in after["node1"].items() if not k.startswith("var/cache")} == before["node1"]
    assert dpkg_versions(fleet.roots["node1"]) == {}


@pytest.mark.parametrize("attack", ["tampered-tool", "resigned-by-another-key", "no-node-check"])
def test_a_node_tool_that_is_not_the_operators_is_refused_on_the_controller_and_never_runs(
    attack: str, bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    marker = tmp_path / "MARKER"  # the tampered zipapp writes it if anything ever runs it
    evil = {NODE_TOOL: tamper.marker_zipapp(marker)}
    if attack == "tampered-tool":  # the original NODE-SHA256SUMS and signatures
        bad = tamper.repack(bundle, tmp_path / "bad.tar.zst", evil)
    elif attack == "resigned-by-another-key":
        bad = tamper.repack(
            bundle, tmp_path / "bad.tar.zst", tamper.resigned_node_check(bundle, other_key, evil)
        )
    else:  # the node check left out, as an older gpu-airgap built it
        bad = tamper.repack(bundle, tmp_path / "bad.tar.zst", evil, drop=[NODE_SUMS, NODE_SUMS_SIGNATURE])
    fleet = Fleet(tmp_path / "fleet", bundle, operator_key.public)
    before = fleet.digests()
    play = fleet.play("site.yml", bundle=bad)
    assert play.returncode != 0
    assert set(play.stats) == {"node1"} and play.stats["node1"]["failures"] == 1, (
        play.stats
    )  # the canary batch only
    failed = play.task(
        "node1", "Take the node tool out of the bundle and check it against the operator key (controller)"
    )
    words = {
        "tampered-tool": "does not match its signed NODE-SHA256SUMS",
        "resigned-by-another-key": "is not signed by the operator key",
        "no-node-check": "has no NODE-SHA256SUMS",
    }[attack]
    assert failed["status"] == "failed" and words in failed["result"]["stderr"], failed
    assert not any(r["task"] == "Install the toolkit from the bundle" for r in play.results)
    assert not marker.exists(), "the tampered node tool ran"
    assert fleet.digests() == before
    assert not list(
        (fleet.tmp / "home/.cache/gpu-airgap/ansible").rglob("*.pyz")
    )  # nothing left to copy later


def test_failed_uninstall_still_removes_the_throwaway_copy_of_the_node_tool(
    bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    # nothing cached: the tool goes to a temp dir
    fleet = Fleet(tmp_path / "fleet", bundle, operator_key.public, TWO_HOSTS)
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    play = fleet.play(
        "uninstall.yml",
        "-e",
        "gpu_airgap_python=/bin/false",
        serial=json.dumps({"gpu_airgap_serial": len(TWO_HOSTS)}),
        tmpdir=node_tmp,
    )
    assert play.returncode != 0
    for host in TWO_HOSTS:
        failed = play.task(host, "Uninstall the toolkit and restore the engine configuration")
        assert failed["status"] == "failed", failed
        assert play.task(host, "Remove the throwaway directory")["status"] == "ok"
    made = [r["result"]["path"] for r in play.results if r["task"] == "Throwaway directory for the node tool"]
    assert len(made) == len(TWO_HOSTS) and all(Path(path).parent == node_tmp for path in made), made
    assert list(node_tmp.iterdir()) == []


def test_sample_playbooks_pass_ansible_syntax_check(tmp_path: Path) -> None:
    for playbook in ("site.yml", "uninstall.yml"):
        proc = subprocess.run(
            [
                str(Path(sys.executable).with_name("ansible-playbook")),
                "--syntax-check",
                "-i",
                str(ANSIBLE_DIR / "inventory.example.ini"),
                str(ANSIBLE_DIR / playbook),
            ],
            env={**os.environ, "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "t")},
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the mirror path: the published tree instead of the bundle ----------------------------------


#: the mirror fleet: node1 is Debian-like, node2 an rpm node (no dpkg database)
DEB_HOST, RPM_HOST = TWO_HOSTS
#: `mirror publish --keyring-name` of the stand-in tree: the role must follow it (gpu_airgap_keyring_name)
KEYRING_NAME = "corp-nvct"


@dataclass
class MirrorRollout:
    """What each run of the mirror path's sequence did, with the roots' trees around it."""

    fleet: Fleet
    published: Path
    before: Dict[str, Dict[str, str]]
    check: Play
    after_check: Dict[str, Dict[str, str]]
    first: Play
    reports: Path  #: the first run's gpu_airgap_report_dir
    runtimes: Dict[str, str]
    second: Play
    rotated_key: TestKey  #: the key BASE_URL/gpgkey serves after `second`
    before_rotation: Dict[str, Dict[str, str]]
    check_rotated: Play
    after_check_rotated: Dict[str, Dict[str, str]]
    rotated: Play
    check_uninstall: Play
    after_check_uninstall: Dict[str, Dict[str, str]]
    installed: Dict[str, Dict[str, str]]  #: the trees after the rotated key's run, before uninstall.yml
    uninstall: Play
    after_uninstall: Dict[str, Dict[str, str]]
    uninstall_again: Play


@pytest.fixture(scope="module")
def mirror_rollout(
    bundle: Path, operator_key: TestKey, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MirrorRollout]:
    """The .list/.repo `mirror publish` renders, served on 127.0.0.1; --check, install, install again,
    --check and install after the mirror's key is rotated, uninstall --check, uninstall, uninstall again.

    The roots are scratch roots, so the role leaves the packages to apt/dnf on live nodes only and
    this covers the key, the repository definition and the runtime registration, and undoing them.
    node2 (the rpm node) trusts the operator key given as gpu_airgap_mirror_key; node1 fetches
    BASE_URL/gpgkey.
    """
    tmp = tmp_path_factory.mktemp("fleet-mirror")
    site = tmp / "site"
    (site / "stable/deb").mkdir(parents=True)
    (site / "stable/rpm").mkdir(parents=True)
    (site / "gpgkey").write_bytes(operator_key.public.read_bytes())
    with UpstreamServer(site) as server:
        published = Site(server.url, KEYRING_NAME, ("stable",), ("stable",))
        (site / "stable/deb/nvidia-container-toolkit.list").write_text(render_list(published, "stable"))
        (site / "stable/deb/nvidia-container-toolkit.pref").write_text(render_pref(published))
        (site / "stable/rpm/nvidia-container-toolkit.repo").write_text(render_repo(published, "stable"))
        subprocess.run(["tar", "-xf", str(bundle), "-C", str(tmp), "gpu-airgap-node.pyz"], check=True)
        fleet = Fleet(tmp / "fleet", bundle, operator_key.public, TWO_HOSTS)
        (fleet.roots[RPM_HOST] / "var/lib/dpkg/status").unlink()
        inventory = fleet.tmp / "inventory.ini"
        inventory.write_text(
            inventory.read_text().replace(
                f"{RPM_HOST} gpu_airgap_root=",
                f"{RPM_HOST} gpu_airgap_mirror_key={operator_key.public} gpu_airgap_root=",
            )
        )
        extra = (
            "-e",
            "gpu_airgap_source=mirror",
            "-e",
            f"gpu_airgap_mirror_url={server.url}",
            "-e",
            f"gpu_airgap_zipapp={tmp / 'gpu-airgap-node.pyz'}",
            "-e",
            f"gpu_airgap_keyring_name={KEYRING_NAME}",
        )
        before = fleet.digests()
        check = fleet.play("site.yml", "--check", "--diff", *extra)
        after_check = fleet.digests()
        reports = fleet.tmp / "reports"
        first = fleet.play("site.yml", "-e", f"gpu_airgap_report_dir={reports}", *extra)
        runtimes = {host: _runtime(root) for host, root in fleet.roots.items()}
        second = fleet.play("site.yml", *extra)
        rotated_key = make_key(tmp / "rotated-gpg", "rotated mirror key <mirror@example.invalid>")
        (site / "gpgkey").write_bytes(rotated_key.public.read_bytes())
        # a tree published before mirror publish wrote the apt pin answers 404 for it: the role goes on
        (site / "stable/deb/nvidia-container-toolkit.pref").unlink()
        before_rotation = fleet.digests()
        check_rotated = fleet.play("site.yml", "--check", *extra)
        after_check_rotated = fleet.digests()
        rotated = fleet.play("site.yml", *extra)
        installed = fleet.digests()
        check_uninstall = fleet.play("uninstall.yml", "--check", *extra)
        after_check_uninstall = fleet.digests()
        uninstall = fleet.play("uninstall.yml", *extra)
        after_uninstall = fleet.digests()
        uninstall_again = fleet.play("uninstall.yml", *extra)
        yield MirrorRollout(
            fleet,
            site,
            before,
            check,
            after_check,
            first,
            reports,
            runtimes,
            second,
            rotated_key,
            before_rotation,
            check_rotated,
            after_check_rotated,
            rotated,
            check_uninstall,
            after_check_uninstall,
            installed,
            uninstall,
            after_uninstall,
            uninstall_again,
        )
        stop_agent(rotated_key.home)


def test_mirror_path_check_mode_changes_nothing(mirror_rollout: MirrorRollout) -> None:
    check = mirror_rollout.check
    assert check.returncode == 0, check.output
    assert all(check.changed()[h] > 0 for h in TWO_HOSTS), check.stats
    assert mirror_rollout.after_check == mirror_rollout.before
    # a missing key shows as a change under --check, not as skipped
    assert check.task(DEB_HOST, "Dearmor the key for apt's signed-by")["result"]["changed"] is True


def test_mirror_path_installs_the_key_and_source_and_registers_the_runtime_then_reports_no_change(
    mirror_rollout: MirrorRollout, operator_key: TestKey
) -> None:
    first = mirror_rollout.first
    assert first.returncode == 0, first.output
    dearmored = subprocess.run(
        ["gpg", "--dearmor"], input=operator_key.public.read_bytes(), capture_output=True, check=True
    ).stdout
    listing = (mirror_rollout.published / "stable/deb/nvidia-container-toolkit.list").read_bytes()
    assert f"signed-by=/usr/share/keyrings/{KEYRING_NAME}.gpg".encode() in listing
    for host in TWO_HOSTS:
        tree = mirror_rollout.before_rotation[host]  # after the install runs
        assert mirror_rollout.runtimes[host] == "nvidia", host
        assert first.task(host, "Register the runtime with the engine")["result"]["engines_changed"] == [
            "containerd"
        ]
        report = json.loads(
            (mirror_rollout.reports / f"{host}.json").read_text()
        )  # collected on the controller
        assert report["source"] == "mirror" and report["engines_changed"] == ["containerd"], report
        assert report["configure"]["already_configured"] is False, report
        if host == RPM_HOST:
            continue
        assert _content(tree, f"usr/share/keyrings/{KEYRING_NAME}.gpg") == _sha256(dearmored), host
        assert _content(tree, "etc/apt/sources.list.d/nvidia-container-toolkit.list") == _sha256(listing), (
            host
        )
        pin = render_pref(Site("http://127.0.0.1", KEYRING_NAME, ("stable",), ())).encode()  # by host only
        assert b"Pin: origin 127.0.0.1\nPin-Priority: 990\n" in pin  # the mirror's toolkit wins (issue 26.5)
        assert _content(tree, "etc/apt/preferences.d/nvidia-container-toolkit.pref") == _sha256(pin), host
        assert "etc/yum.repos.d" not in tree, host
        assert (
            first.task(host, "Install the pinned packages with apt")["status"] == "skipped"
        )  # scratch root: no apt
    assert mirror_rollout.second.returncode == 0, mirror_rollout.second.output
    assert mirror_rollout.second.changed() == dict.fromkeys(TWO_HOSTS, 0), mirror_rollout.second.stats


def test_mirror_path_replaces_the_dearmored_key_when_the_mirror_key_rotates(
    mirror_rollout: MirrorRollout,
) -> None:
    # (under --check get_url compares with an empty file, so it reports every download as a change;
    # what --check must not do is touch the roots)
    check = mirror_rollout.check_rotated
    assert check.returncode == 0, check.output
    assert mirror_rollout.after_check_rotated == mirror_rollout.before_rotation
    rotated = mirror_rollout.rotated
    assert rotated.returncode == 0, rotated.output
    new = subprocess.run(
        ["gpg", "--dearmor"],
        input=mirror_rollout.rotated_key.public.read_bytes(),
        capture_output=True,
        check=True,
    ).stdout
    before, after = mirror_rollout.before_rotation[DEB_HOST], mirror_rollout.installed[DEB_HOST]
    assert _content(before, f"usr/share/keyrings/{KEYRING_NAME}.gpg") != _sha256(new)
    assert _content(after, f"usr/share/keyrings/{KEYRING_NAME}.gpg") == _sha256(new)


def test_mirror_path_on_an_rpm_node_trusts_the_given_key_through_a_file_url(
    mirror_rollout: MirrorRollout, operator_key: TestKey
) -> None:
    tree = mirror_rollout.installed[RPM_HOST]  # after the install runs (and the deb node's key rotation)
    key = f"/etc/pki/rpm-gpg/{KEYRING_NAME}.asc"
    assert _content(tree, key.lstrip("/")) == _sha256(operator_key.public.read_bytes())
    published = (mirror_rollout.published / "stable/rpm/nvidia-container-toolkit.repo").read_text()
    assert re.search(r"(?m)^gpgkey=http://127\.0\.0\.1:\d+/gpgkey$", published)
    expected = re.sub(r"(?m)^gpgkey=.*$", f"gpgkey=file://{key}", published)
    assert _content(tree, "etc/yum.repos.d/nvidia-container-toolkit.repo") == _sha256(expected.encode())
    assert "usr/share/keyrings" not in tree and "etc/apt/sources.list.d" not in tree
    assert "etc/apt/preferences.d/nvidia-container-toolkit.pref" not in tree
    assert mirror_rollout.first.task(RPM_HOST, "Install the pinned packages with dnf")["status"] == "skipped"


def test_mirror_path_uninstall_restores_every_root_and_a_second_run_changes_nothing(
    mirror_rollout: MirrorRollout,
) -> None:
    check = mirror_rollout.check_uninstall
    assert check.returncode == 0, check.output
    assert all(check.changed()[h] > 0 for h in TWO_HOSTS), check.stats
    assert mirror_rollout.after_check_uninstall == mirror_rollout.installed  # --check changed nothing
    uninstall = mirror_rollout.uninstall
    assert uninstall.returncode == 0, uninstall.output
    for host, root in mirror_rollout.fleet.roots.items():
        assert (root / CONTAINERD).read_bytes() == CONTAINERD_CONFIG, host
        assert _runtime(root) == "", host
        assert uninstall.task(host, "Restore the engine configuration configure changed")["result"][
            "engines_changed"
        ] == ["containerd"]
        assert not (root / "var/cache/gpu-airgap/fleet").exists(), host
        # every file is as before the rollout: config restored, key, .list/.repo and drop-ins gone
        # (the directories the role made stay, and so does configure's emptied journal)
        assert _files(mirror_rollout.after_uninstall[host]) == _files(mirror_rollout.before[host]), host
    again = mirror_rollout.uninstall_again
    assert again.returncode == 0, again.output
    assert again.changed() == dict.fromkeys(TWO_HOSTS, 0), again.stats


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _content(tree: Dict[str, str], path: str) -> str:
    """The content digest ``tree_digest`` recorded for the file ``path`` (fails if it was not a file)."""
    kind, _mode, digest = tree[path].split(":")
    assert kind == "file", (path, tree[path])
    return digest


def _files(tree: Dict[str, str]) -> Dict[str, str]:
    return {
        path: what
        for path, what in tree.items()
        if what.startswith("file:") and not path.startswith("var/lib/gpu-airgap/")
    }
