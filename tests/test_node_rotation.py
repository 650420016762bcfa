"""Issue 24 items 11, 12 and 20 at a node's first check: gpgv's status lines decide, not its exit status.

The node command (``installer.nodecheck.node_command``) and ``install.sh`` run with the node's own
tools against real bundles and real keys: a bundle the old and the new operator key both signed is
accepted by a node holding either key alone (plain ``gpgv`` exits 2 there: a signature by a key it
lacks), a signature by an unknown key, a weak digest (SHA-1, RIPEMD-160) or a bad second signature
is refused with a reason, and ``--fingerprint`` pins one key of a key file. Refused bundles carry a
node tool that writes a marker when run; the marker must never appear, and a control shows it does
when the signature is one the node trusts. (The Ansible role's and the DaemonSet's checks:
tests/test_fleet_node_check.py.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, Optional

import pytest

from installer import nodecheck
from installer.nodecheck import HEAD, NODE_SUMS, NODE_SUMS_SIGNATURE, NODE_TOOL, node_command
from plumbing.errors import ExitCode
from tests import bundle_tamper as tamper
from tests.gpgkeys import TestKey
from tests.node_fixtures import node_python, node_tools_dir
from tests.test_node_trust import BUNDLE, Node

ROOT = Path(__file__).resolve().parents[1]
INSTALL_SH = ROOT / "mirror/bundle/data/install.sh"
VERIFY_NODE_TOOL = (
    ROOT
    / "deploy/ansible/collections/ansible_collections/airgap/gpu_airgap/roles/gpu_airgap/files/verify-node-tool.sh"
)
GPG_DIGESTS = {"SHA-1": "SHA1", "RIPEMD-160": "RIPEMD160", "SHA-256": "SHA256"}


@pytest.fixture(scope="module")
def node_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return node_tools_dir(tmp_path_factory.mktemp("node-bin"))


def signature(key: TestKey, data: bytes, digest: str = "SHA512") -> bytes:
    """A real armored detached signature over ``data`` by ``key`` made with ``digest``."""
    return subprocess.run(
        [
            *("gpg", "--homedir", str(key.home), "--batch", "--quiet", "--local-user", key.fingerprint),
            *("--digest-algo", digest, "--armor", "--detach-sign"),
        ],
        input=data,
        capture_output=True,
        check=True,
    ).stdout


def marker_tool_signed(
    bundle: Path, out: Path, marker: Path, asc: bytes | None = None, *, by: TestKey
) -> Path:
    """``bundle`` whose node tool writes ``marker`` when run, listed in a NODE-SHA256SUMS ``by`` signed.

    ``asc``: the signature to ship instead of ``by``'s SHA-512 one (a weak digest, a bad second one).
    """
    replace = tamper.resigned_node_check(bundle, by, {NODE_TOOL: tamper.marker_zipapp(marker)})
    if asc is not None:
        replace[NODE_SUMS_SIGNATURE] = asc
    return tamper.repack(bundle, out, replace)


def key_file(path: Path, *keys: TestKey) -> Path:
    path.write_bytes(b"".join(key.public.read_bytes() for key in keys))
    return path


class Admin(Node):
    """The admin's directory: the bundle, the key file; the node command or install.sh run as documented."""

    def __init__(self, tmp_path: Path, node_bin: Path, bundle: Path, key: Path, marker: Path) -> None:
        super().__init__(tmp_path, node_bin, bundle, key)
        self.marker = marker
        self.env["PATH"] = f"{node_bin}:/usr/bin:/bin"  # the dry run reads the node (dpkg-query)

    def command(self, fingerprint: Optional[str] = None) -> subprocess.CompletedProcess[str]:
        line = f"{node_command(BUNDLE, fingerprint=fingerprint)} --root {self.root} --dry-run"
        return self._sh(["sh", "-c", line])

    def install_sh(self, *args: str, path: Optional[str] = None) -> subprocess.CompletedProcess[str]:
        """``sh install.sh`` run from the admin's directory, the node files taken out with tar (the step skipped)."""
        subprocess.run(["tar", "--occurrence", "-xf", BUNDLE, *HEAD], cwd=self.dir, check=True)
        argv = [
            "sh",
            "install.sh",
            BUNDLE,
            "--keyring",
            "operator.asc",
            *args,
            "--root",
            str(self.root),
            "--dry-run",
        ]
        return self._sh(argv, path)

    def _sh(self, argv: list[str], path: Optional[str] = None) -> subprocess.CompletedProcess[str]:
        env: Dict[str, str] = {**self.env, "PATH": path or self.env["PATH"]}
        return subprocess.run(
            argv, cwd=self.dir, env=env, capture_output=True, text=True, timeout=180, check=False
        )

    def refused(
        self, done: subprocess.CompletedProcess[str], reason: str, code: Optional[int] = None
    ) -> None:
        assert done.returncode != 0 if code is None else done.returncode == code, done.stdout + done.stderr
        assert reason in done.stderr, done.stderr
        assert "dry run" not in done.stdout and not self.marker.exists(), "code from the bundle ran"

    def ran_marker(self, done: subprocess.CompletedProcess[str]) -> None:
        assert self.marker.exists(), done.stdout + done.stderr
        self.marker.unlink()


def _admin(tmp_path: Path, node_bin: Path, bundle: Path, key: Path, name: str = "admin") -> Admin:
    return Admin(tmp_path / name, node_bin, bundle, key, tmp_path / "MARKER")


# -- 20: a node holding either key accepts a bundle both keys signed ---------------------------------


@pytest.mark.parametrize("holds", ["old", "new"])
def test_the_node_command_and_install_sh_accept_a_dual_signed_bundle_on_a_node_holding_either_key(
    holds: str,
    dual_bundle: Path,
    rotation: tuple[TestKey, TestKey],
    node_bin: Path,
    tmp_path: Path,
) -> None:
    key = dict(zip(("old", "new"), rotation))[holds]
    sums = tmp_path / NODE_SUMS
    sums.write_bytes(_member(dual_bundle, NODE_SUMS))
    plain_gpgv = subprocess.run(  # what the command ran before: gpgv refuses the unknown second signer
        [
            "gpgv",
            "--homedir",
            str(tmp_path),
            "--keyring",
            str(_dearmor(key.public, tmp_path)),
            "-",
            str(sums),
        ],
        input=_member(dual_bundle, NODE_SUMS_SIGNATURE),
        capture_output=True,
        check=False,
    )
    assert plain_gpgv.returncode == 2 and b"No public key" in plain_gpgv.stderr  # the premise
    admin = _admin(tmp_path, node_bin, dual_bundle, key.public)
    done = admin.command()
    assert done.returncode == 0, done.stderr
    assert "dry run: nothing was changed" in done.stdout and f"signed by {key.fingerprint}" in done.stdout
    assert "Can't check signature: No public key" in done.stderr  # the other key's signature, not counted
    pinned = admin.command(fingerprint=key.fingerprint)
    assert pinned.returncode == 0 and f"signed by {key.fingerprint}" in pinned.stdout, pinned.stderr
    direct = admin.install_sh()
    assert direct.returncode == 0 and "dry run: nothing was changed" in direct.stdout, direct.stderr
    no_gpgv = _system_tools_but_gpgv(tmp_path / "no-gpgv")  # install.sh falls back to gpg --verify
    fallback = admin.install_sh("--fingerprint", key.fingerprint, path=str(no_gpgv))
    assert fallback.returncode == 0 and "dry run: nothing was changed" in fallback.stdout, fallback.stderr


def _member(bundle: Path, name: str) -> bytes:
    return dict((info.name, data) for info, data in tamper.members(bundle))[name]


def _dearmor(key: Path, work: Path) -> Path:
    out = work / "key.gpg"
    subprocess.run(
        ["gpg", "--homedir", str(work), "--batch", "--yes", "--dearmor", "-o", str(out), str(key)], check=True
    )
    return out


def _system_tools_but_gpgv(path: Path) -> Path:
    """A PATH directory with every system command but gpgv (a node without the gpgv package), python3 the node's."""
    path.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if tool.name not in ("gpgv", "python3"):
            (path / tool.name).symlink_to(tool)
    (path / "python3").symlink_to(node_python())
    return path


# -- refusals: an unknown signer, a weak digest, a bad second signature, another key than the pinned ----


def test_a_bundle_signed_only_by_an_unknown_key_is_refused_saying_so(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey, node_bin: Path, tmp_path: Path
) -> None:
    bad = marker_tool_signed(deb_bundle, tmp_path / "bad.tar.zst", tmp_path / "MARKER", by=other_key)
    admin = _admin(tmp_path, node_bin, bad, operator_key.public)
    done = admin.command()
    admin.refused(
        done, "NODE-SHA256SUMS.asc: no good signature by the operator key; nothing from the bundle ran"
    )
    assert "Can't check signature: No public key" in done.stderr
    admin.refused(admin.install_sh(), "NODE-SHA256SUMS next to this script is not signed by the key in", 3)
    fooled = _admin(
        tmp_path, node_bin, bad, other_key.public, "fooled"
    )  # control: trusting the signer runs it
    fooled.ran_marker(fooled.command())


@pytest.mark.parametrize(
    ("digest", "gpgv_says"), [("SHA-1", "SHA1 algorithm are rejected"), ("RIPEMD-160", "")]
)
def test_a_node_check_signed_with_a_weak_digest_is_refused(
    digest: str, gpgv_says: str, deb_bundle: Path, operator_key: TestKey, node_bin: Path, tmp_path: Path
) -> None:
    """SHA-1: gpgv refuses it itself (--weak-digest SHA1); RIPEMD-160, which gpgv accepts: the status line's digest field."""
    marker = tmp_path / "MARKER"
    sums = tamper.resigned_node_check(deb_bundle, operator_key, {NODE_TOOL: tamper.marker_zipapp(marker)})[
        NODE_SUMS
    ]
    weak = signature(operator_key, sums, GPG_DIGESTS[digest])
    bad = marker_tool_signed(deb_bundle, tmp_path / "weak.tar.zst", marker, weak, by=operator_key)
    admin = _admin(tmp_path, node_bin, bad, operator_key.public)
    done = admin.command()
    admin.refused(done, "NODE-SHA256SUMS.asc: no good signature by the operator key;")
    assert gpgv_says in done.stderr
    admin.refused(admin.install_sh(), "is not signed by the key in", 3)
    strong = marker_tool_signed(deb_bundle, tmp_path / "strong.tar.zst", marker, by=operator_key)
    control = _admin(tmp_path, node_bin, strong, operator_key.public, "control")  # the same, SHA-512: runs
    control.ran_marker(control.command())
    control.ran_marker(control.install_sh())


def test_a_bad_second_signature_refuses_the_bundle_even_with_a_good_one(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey, node_bin: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "MARKER"
    sums = tamper.resigned_node_check(deb_bundle, operator_key, {NODE_TOOL: tamper.marker_zipapp(marker)})[
        NODE_SUMS
    ]
    both = signature(operator_key, sums) + signature(
        other_key, sums + b"# more\n"
    )  # the second over other bytes
    bad = marker_tool_signed(deb_bundle, tmp_path / "bad.tar.zst", marker, both, by=operator_key)
    keys = key_file(tmp_path / "both.asc", operator_key, other_key)
    admin = _admin(tmp_path, node_bin, bad, keys)
    done = admin.command(fingerprint=operator_key.fingerprint)
    admin.refused(done, f"no good signature by the operator key {operator_key.fingerprint};")
    assert "BAD signature" in done.stderr and 'Good signature from "bundle operator' in done.stderr
    admin.refused(admin.install_sh("--fingerprint", operator_key.fingerprint), "is not signed by the key", 3)


def test_a_pinned_fingerprint_refuses_a_signature_by_another_key_of_the_file(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey, node_bin: Path, tmp_path: Path
) -> None:
    bad = marker_tool_signed(deb_bundle, tmp_path / "bad.tar.zst", tmp_path / "MARKER", by=other_key)
    keys = key_file(tmp_path / "both.asc", operator_key, other_key)
    admin = _admin(tmp_path, node_bin, bad, keys)
    pinned = operator_key.fingerprint
    done = admin.command(fingerprint=pinned.lower())
    admin.refused(done, f"NODE-SHA256SUMS.asc: no good signature by the operator key {pinned}; nothing")
    assert 'Good signature from "someone else' in done.stderr  # gpgv alone would have run it
    spaced = " ".join(re.findall("....", pinned))  # as gpg --fingerprint prints it
    admin.refused(
        admin.install_sh("--fingerprint", spaced), f"is not signed by the key {pinned} in operator.asc", 3
    )
    # Control: unpinned, any key of the file counts (the node tool then refuses a file of two keys).
    admin.ran_marker(admin.command())


def test_install_sh_refuses_a_fingerprint_that_is_not_forty_hex_digits(
    dual_bundle: Path,
    rotation: tuple[TestKey, TestKey],
    node_bin: Path,
    tmp_path: Path,
) -> None:
    admin = _admin(tmp_path, node_bin, dual_bundle, rotation[0].public)
    done = admin.install_sh("--fingerprint", rotation[0].fingerprint[-16:])
    admin.refused(done, "is not a full 40-hex-digit fingerprint", ExitCode.USAGE)


# -- one decision, the same text everywhere ----------------------------------------------------------------


@pytest.mark.parametrize("script", [INSTALL_SH, VERIFY_NODE_TOOL], ids=["install.sh", "verify-node-tool.sh"])
def test_the_shell_checks_carry_the_node_commands_decision_literally(script: Path) -> None:
    text = script.read_text()
    assert (
        "--weak-digest SHA1 --status-fd 1" in text
        and nodecheck.GPGV_OPTIONS == "--weak-digest SHA1 --status-fd 1"
    )
    assert f"grep -Eq '{nodecheck.REFUSING_STATUS}'" in text
    assert f"grep -Eq '{nodecheck.GOOD_SIGNATURE}'\"$key_pattern\"'$'" in text
    assert f"key_pattern='{nodecheck.ANY_KEY}'" in text
