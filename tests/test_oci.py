"""``bundle push|pull`` and ``install oci://`` against the real registry (Debian's distribution 2.8) on 127.0.0.1.

One registry per kind, shared by the module: anonymous plain http; https with a test CA and
htpasswd (basic) auth; token (bearer) auth with a token service in the test process. Bundles are
real signed bundles (``write_signed_bundle``) and installs go into scratch roots with real dpkg.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from installer.state import load_state
from installer.target import StagedTarget
from tests.cli_runner import CliResult, install_argv, run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import (
    TOOLKIT,
    build_target,
    dpkg_versions,
    node_python,
    seed_containerd_node,
    tree_digest,
    write_signed_bundle,
)
from tests.oci_registry import (
    DockerConfig,
    Registry,
    TokenServer,
    basic_entry,
    free_port,
    htpasswd_file,
    make_tls,
)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> StagedTarget:
    return build_target(tmp_path_factory.mktemp("oci-packages"), "deb", "1.17.8-1", "amd64")


@pytest.fixture(scope="module")
def bundles(
    target: StagedTarget, test_key: TestKey, other_key: TestKey, tmp_path_factory: pytest.TempPathFactory
) -> Dict[str, Path]:
    out = tmp_path_factory.mktemp("oci-bundles")
    return {
        "whole": write_signed_bundle(
            out / "whole/nvct.tar.gz", [target], test_key.home, test_key.fingerprint
        ),
        "split": write_signed_bundle(
            out / "split/nvct.tar.gz", [target], test_key.home, test_key.fingerprint, split=1 << 20
        ),
        "other": write_signed_bundle(
            out / "other/nvct.tar.gz", [target], other_key.home, other_key.fingerprint
        ),
    }


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with Registry(tmp_path_factory.mktemp("registry-anon")) as reg:
        yield reg


@pytest.fixture(scope="module")
def tls_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Registry, Path]]:
    work = tmp_path_factory.mktemp("registry-tls")
    ca, cert, key = make_tls(work / "tls")
    users = htpasswd_file(work / "htpasswd", {"ops": "s3cret"})
    with Registry(
        work / "reg", auth={"htpasswd": {"realm": "gpu-airgap-test", "path": str(users)}}, tls=(cert, key)
    ) as reg:
        yield reg, ca


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Registry, TokenServer]]:
    work = tmp_path_factory.mktemp("registry-token")
    tokens = TokenServer(work / "tokens", users={"ops": "s3cret"}, refresh_tokens={"id-token-of-ops": "ops"})
    try:
        with Registry(work / "reg", auth=tokens.registry_auth()) as reg:
            yield reg, tokens
    finally:
        tokens.close()


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No docker config of the machine's; the install spool goes to a directory the test can inspect."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setenv("TMPDIR", str(spool))
    return spool


def _push(bundle: Path, ref: str, key: TestKey, *extra: str) -> Dict[str, object]:
    result = run_cli("bundle", "push", str(bundle), ref, "--keyring", str(key.public), "--json", *extra)
    assert result.exit_code == 0, result.stderr
    data: Dict[str, object] = json.loads(result.stdout)
    return data


def _pull(ref: str, out: Path, key: TestKey, *extra: str) -> CliResult:
    return run_cli("bundle", "pull", ref, "--output", str(out), "--keyring", str(key.public), *extra)


def _stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))


def _one_sentence(result: CliResult) -> str:
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("gpu-airgap: error: ") and "Traceback" not in result.stderr, (
        result.stderr
    )
    return lines[-1]


# -- anonymous registry: round trips ------------------------------------------------------------


def test_install_from_a_tag_installs_the_pushed_bundle_and_leaves_no_download_behind(
    registry: Registry, bundles: Dict[str, Path], test_key: TestKey, tmp_path: Path, _isolated: Path
) -> None:
    pushed = _push(bundles["whole"], registry.ref("team/nvct:1.17.8"), test_key)
    root = seed_containerd_node(tmp_path / "root")
    result = run_cli(
        "install",
        registry.ref("team/nvct:1.17.8"),
        "--keyring",
        str(test_key.public),
        "--root",
        str(root),
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    assert dpkg_versions(root) == dict.fromkeys(TOOLKIT, "1.17.8-1")
    state = load_state(root)
    assert (
        state is not None and state.bundle_id == pushed["bundle_id"] == json.loads(result.stdout)["bundle_id"]
    )
    assert f"pulling {registry.ref('team/nvct@')}{pushed['digest']}" in result.stderr
    assert list(_isolated.iterdir()) == []


def test_pull_by_digest_writes_exactly_the_pushed_bytes_after_verifying_them(
    registry: Registry, bundles: Dict[str, Path], test_key: TestKey, tmp_path: Path
) -> None:
    pushed = _push(bundles["whole"], registry.ref("team/nvct:pull"), test_key)
    manifest = json.loads(registry.blob_data(str(pushed["digest"])).read_bytes())
    assert manifest["artifactType"] == "application/vnd.gpu-airgap.bundle.v1"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert [layer["mediaType"] for layer in manifest["layers"]] == [
        "application/vnd.gpu-airgap.bundle.v1.tar+gzip"
    ]
    assert manifest["annotations"]["vnd.gpu-airgap.bundle.manifest.digest"] == f"sha256:{pushed['bundle_id']}"
    assert manifest["annotations"]["vnd.gpu-airgap.bundle.signer"] == test_key.fingerprint
    out = tmp_path / "pulled.tar.gz"
    result = _pull(str(pushed["pinned"]), out, test_key, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["signer"] == test_key.fingerprint and report["digest"] == pushed["digest"]
    assert out.read_bytes() == bundles["whole"].read_bytes()
    assert [p.name for p in tmp_path.iterdir() if p.name != "spool"] == [
        "pulled.tar.gz"
    ]  # no private download left


def test_pull_streams_the_verified_bundle_into_a_pipe_and_through_a_link_to_dev_null(
    registry: Registry, bundles: Dict[str, Path], test_key: TestKey, tmp_path: Path
) -> None:
    pushed = _push(bundles["whole"], registry.ref("team/nvct:stream"), test_key)
    fifo, link = tmp_path / "pipe", tmp_path / "discard.tar.gz"
    os.mkfifo(fifo)
    link.symlink_to("/dev/null")
    got: List[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    for target in (fifo, link):
        result = _pull(str(pushed["pinned"]), target, test_key)
        assert result.exit_code == 0, result.stderr
        assert f"wrote {target}" in result.stdout
    reader.join(timeout=30)
    assert got == [bundles["whole"].read_bytes()] and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert link.is_symlink() and os.path.realpath(link) == "/dev/null"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["discard.tar.gz", "pipe", "spool"]


def test_split_bundle_travels_as_its_parts_and_verifies_from_its_first_part(
    registry: Registry, bundles: Dict[str, Path], test_key: TestKey, tmp_path: Path
) -> None:
    first = bundles["split"]
    pushed = _push(first, registry.ref("team/nvct:split"), test_key)
    titles = [layer["annotations"]["org.opencontainers.image.title"] for layer in pushed["layers"]]  # type: ignore[attr-defined]
    originals = sorted(p for p in first.parent.iterdir())
    assert titles == [p.name for p in originals] and len(titles) >= 4
    out = tmp_path / "out"
    out.mkdir()
    pulled = _pull(registry.ref("team/nvct:split"), out, test_key)
    assert pulled.exit_code == 0, pulled.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {p.name: p.read_bytes() for p in originals}
    verified = run_cli("bundle", "verify", str(out / first.name), "--keyring", str(test_key.public))
    assert verified.exit_code == 0, verified.stderr
    again = tmp_path / "again"
    again.mkdir()
    stale = (
        again / f"{first.name[: -len('.part001')]}.part{len(titles) - 1:03d}"
    )  # from an older, longer split
    stale.write_bytes(b"stale")
    by_name = _pull(registry.ref("team/nvct:split"), again / "nvct.tar.gz", test_key)
    assert by_name.exit_code == 0, by_name.stderr
    assert not stale.exists() and sorted(p.name for p in again.iterdir()) == sorted(titles)
    renamed = _pull(registry.ref("team/nvct:split"), out / "other-name.tar.gz", test_key)
    assert renamed.exit_code == 2 and "names its parts nvct.tar.gz.partNNN" in _one_sentence(renamed)


# -- anonymous registry: what must be refused ---------------------------------------------------


def test_a_tampered_blob_is_refused_and_nothing_is_installed_or_written(
    registry: Registry, target: StagedTarget, test_key: TestKey, tmp_path: Path, _isolated: Path
) -> None:
    # a bundle of its own: blobs are shared by digest across the registry's repositories
    bundle = write_signed_bundle(
        tmp_path / "b/tamper.tar.gz", [target], test_key.home, test_key.fingerprint, release="1.17.8-t"
    )
    pushed = _push(bundle, registry.ref("team/tamper:1"), test_key)
    blob = registry.blob_data(pushed["layers"][0]["digest"])  # type: ignore[index]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    root = seed_containerd_node(tmp_path / "root")
    before = tree_digest(root)
    installed = run_cli(
        "install", registry.ref("team/tamper:1"), "--keyring", str(test_key.public), "--root", str(root)
    )
    assert installed.exit_code == 3
    assert "does not match its digest" in _one_sentence(installed)
    assert tree_digest(root) == before and list(_isolated.iterdir()) == []
    out = tmp_path / "pulled"
    pulled = _pull(registry.ref("team/tamper:1"), out, test_key)
    assert (
        pulled.exit_code == 3
        and not out.exists()
        and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    )


def test_a_manifest_that_does_not_hash_to_its_digest_is_refused(
    registry: Registry, target: StagedTarget, test_key: TestKey, tmp_path: Path
) -> None:
    bundle = write_signed_bundle(
        tmp_path / "b/m.tar.gz", [target], test_key.home, test_key.fingerprint, release="1.17.8-m"
    )
    pushed = _push(bundle, registry.ref("team/manifest:1"), test_key)
    stored = registry.blob_data(str(pushed["digest"]))
    stored.write_bytes(stored.read_bytes().replace(b"Toolkit 1.17.8-m", b"Toolkit 1.17.8-X"))
    for ref in (str(pushed["pinned"]), registry.ref("team/manifest:1")):
        result = run_cli(
            "bundle", "pull", ref, "--output", str(tmp_path / "x"), "--keyring", str(test_key.public)
        )
        assert result.exit_code == 3 and "does not match its digest" in _one_sentence(result)


def test_a_bundle_signed_by_another_key_is_pulled_but_not_installed(
    registry: Registry, bundles: Dict[str, Path], test_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    _push(bundles["other"], registry.ref("team/nvct:other"), other_key)
    root = seed_containerd_node(tmp_path / "root")
    before = tree_digest(root)
    result = run_cli(
        "install", registry.ref("team/nvct:other"), "--keyring", str(test_key.public), "--root", str(root)
    )
    assert result.exit_code == 3 and "failed verification" in _one_sentence(result)
    assert tree_digest(root) == before


def test_push_refuses_a_bundle_the_key_does_not_verify_and_stores_nothing(
    registry: Registry, bundles: Dict[str, Path], test_key: TestKey, tmp_path: Path
) -> None:
    result = run_cli(
        "bundle",
        "push",
        str(bundles["other"]),
        registry.ref("team/refused:1"),
        "--keyring",
        str(test_key.public),
    )
    assert result.exit_code == 3 and "failed verification" in _one_sentence(result)
    missing = _pull(registry.ref("team/refused:1"), tmp_path / "x", test_key)
    assert missing.exit_code == 1
    assert _one_sentence(missing).endswith(
        "does not exist in the registry (no such repository, tag or digest)"
    )


def test_registry_options_on_a_file_install_are_a_usage_error(
    bundles: Dict[str, Path], test_key: TestKey, tmp_path: Path
) -> None:
    result = run_cli(
        *install_argv(bundles["whole"], test_key, tmp_path),
        "--plain-http",
    )
    assert result.exit_code == 2 and "apply only to an oci:// bundle" in _one_sentence(result)


def test_an_unreachable_registry_is_a_network_error(
    test_key: TestKey, tmp_path: Path, backoff: list[float]
) -> None:
    result = _pull(f"oci://127.0.0.1:{free_port()}/team/nvct:1", tmp_path / "x", test_key)
    assert result.exit_code == 4 and "cannot reach the registry" in _one_sentence(result)
    assert backoff == [0.5, 1.0]  # three attempts (the waits recorded, not slept)


# -- https with a custom CA and basic auth ------------------------------------------------------


def test_https_registry_with_basic_auth_from_flags_and_from_docker_config(
    tls_registry: Tuple[Registry, Path],
    bundles: Dict[str, Path],
    test_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reg, ca = tls_registry
    _stdin(monkeypatch, "s3cret\n")
    pushed = _push(
        bundles["whole"],
        reg.ref("team/nvct:1"),
        test_key,
        "--ca-file",
        str(ca),
        "--username",
        "ops",
        "--password-stdin",
    )
    config = DockerConfig.write(tmp_path / "docker", f"https://{reg.host}", basic_entry("ops", "s3cret"))
    monkeypatch.setenv("DOCKER_CONFIG", str(config.directory))
    out = tmp_path / "pulled.tar.gz"
    pulled = _pull(reg.ref("team/nvct:1"), out, test_key, "--ca-file", str(ca))
    assert pulled.exit_code == 0, pulled.stderr
    assert out.read_bytes() == bundles["whole"].read_bytes() and pushed["digest"] in pulled.stdout


def test_https_registry_refuses_wrong_or_missing_credentials_in_one_sentence(
    tls_registry: Tuple[Registry, Path], test_key: TestKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, ca = tls_registry
    pull = (
        "bundle",
        "pull",
        reg.ref("team/nvct:1"),
        "--output",
        str(tmp_path / "x"),
        "--keyring",
        str(test_key.public),
        "--ca-file",
        str(ca),
    )
    _stdin(monkeypatch, "wrong\n")
    wrong = run_cli(*pull, "--username", "ops", "--password-stdin")
    assert wrong.exit_code == 1
    assert f"{reg.host} refused the credentials of user 'ops' from the command line" in _one_sentence(wrong)
    anonymous = run_cli(*pull)
    assert anonymous.exit_code == 1 and f"run `docker login {reg.host}`" in _one_sentence(anonymous)
    assert not (tmp_path / "x").exists()


def test_https_certificate_from_an_unknown_ca_is_refused_without_falling_back_to_http(
    tls_registry: Tuple[Registry, Path], test_key: TestKey, tmp_path: Path
) -> None:
    reg, _ = tls_registry
    result = _pull(reg.ref("team/nvct:1"), tmp_path / "x", test_key)
    assert result.exit_code == 4
    assert f"the TLS certificate of {reg.host} is not trusted" in _one_sentence(result)


# -- bearer tokens ------------------------------------------------------------------------------


def test_token_auth_push_with_a_password_and_pull_with_an_identity_token(
    token_registry: Tuple[Registry, TokenServer],
    bundles: Dict[str, Path],
    test_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reg, tokens = token_registry
    tokens.requests.clear()
    _stdin(monkeypatch, "s3cret\n")
    pushed = _push(
        bundles["whole"], reg.ref("team/nvct:1"), test_key, "--username", "ops", "--password-stdin"
    )
    # distribution lists a scope's actions in map order: pull,push or push,pull
    asked = {
        (
            r["method"],
            r["user"],
            r["service"],
            r["scope"].rsplit(":", 1)[0],
            frozenset(r["scope"].rsplit(":", 1)[1].split(",")),
        )
        for r in tokens.requests
    }
    assert (
        "GET",
        "ops",
        "gpu-airgap-test-registry",
        "repository:team/nvct",
        frozenset({"pull", "push"}),
    ) in asked
    config = DockerConfig.write(tmp_path / "docker", reg.host, {"identitytoken": "id-token-of-ops"})
    monkeypatch.setenv("DOCKER_CONFIG", str(config.directory))
    tokens.requests.clear()
    out = tmp_path / "pulled.tar.gz"
    pulled = run_cli(
        "bundle", "pull", str(pushed["pinned"]), "--output", str(out), "--keyring", str(test_key.public)
    )
    assert pulled.exit_code == 0, pulled.stderr
    assert out.read_bytes() == bundles["whole"].read_bytes()
    assert [(r["method"], r["grant_type"], r["scope"]) for r in tokens.requests] == [
        ("POST", "refresh_token", "repository:team/nvct:pull")
    ]


def test_token_auth_refuses_wrong_credentials_and_anonymous_pulls(
    token_registry: Tuple[Registry, TokenServer],
    test_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reg, tokens = token_registry
    pull = (
        "bundle",
        "pull",
        reg.ref("team/nvct:1"),
        "--output",
        str(tmp_path / "x"),
        "--keyring",
        str(test_key.public),
    )
    _stdin(monkeypatch, "wrong\n")
    wrong = run_cli(*pull, "--username", "ops", "--password-stdin")
    assert wrong.exit_code == 1
    assert f"the token service {tokens.realm} refused the credentials of user 'ops'" in _one_sentence(wrong)
    anonymous = run_cli(*pull)  # the token service grants anonymous clients nothing
    assert anonymous.exit_code == 1 and "requires credentials for team/nvct" in _one_sentence(anonymous)


def test_node_zipapp_on_the_oldest_python_installs_from_a_token_registry(
    token_registry: Tuple[Registry, TokenServer],
    bundles: Dict[str, Path],
    test_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    _isolated: Path,
) -> None:
    from mirror.bundle.zipapp import build_zipapp

    reg, _ = token_registry
    _stdin(monkeypatch, "s3cret\n")
    _push(bundles["whole"], reg.ref("team/nvct:node"), test_key, "--username", "ops", "--password-stdin")
    pyz = tmp_path / "gpu-airgap-node.pyz"
    pyz.write_bytes(build_zipapp(epoch=0))
    config = DockerConfig.write(tmp_path / "docker", reg.host, basic_entry("ops", "s3cret"))
    root = seed_containerd_node(tmp_path / "root")
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DOCKER_CONFIG": str(config.directory),
        "TMPDIR": str(_isolated),
        "HOME": str(tmp_path),
        "GPU_AIRGAP_NODE_CACHE": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [
            str(node_python()),
            "-I",
            str(pyz),
            "install",
            reg.ref("team/nvct:node"),
            "--keyring",
            str(test_key.public),
            "--root",
            str(root),
            "--runtime",
            "none",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "installed"
    assert dpkg_versions(root) == dict.fromkeys(TOOLKIT, "1.17.8-1")
    assert list(_isolated.iterdir()) == []
