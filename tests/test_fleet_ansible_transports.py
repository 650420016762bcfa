"""Issue 16 item 4: the role as the collection ``airgap.gpu_airgap``, and nodes that fetch the bundle themselves.

The real ``ansible-doc`` reads the module's documentation and the role's ``meta/argument_specs.yml``;
the real ``ansible-playbook`` rejects a variable the argument specs refuse before any task runs. The
``http`` transport has each node download the bundle from a local HTTP server (pinned to the sha256 of
the controller's bundle); the ``oci`` transport has each node's installer pull it by digest from the
real ``docker-registry`` on 127.0.0.1. In both the node tool is still checked on the controller, and
only the operator key and the tool travel over the (local) connection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, List

import pytest

from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import TOOLKIT, dpkg_versions
from tests.oci_registry import Registry, registry_with_login
from tests.test_fleet_ansible import ANSIBLE_DIR, TWO_HOSTS, Fleet

COLLECTIONS = ANSIBLE_DIR / "collections"
ROLE_TASK = "Install the toolkit from the bundle"


def _ansible_doc(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_HOME": str(tmp / "ansible-home"),
        "ANSIBLE_NOCOLOR": "1",
    }
    argv = [str(Path(sys.executable).with_name("ansible-doc")), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_ansible_doc_shows_the_module_with_its_options_and_examples(tmp_path: Path) -> None:
    doc = _ansible_doc("--json", "airgap.gpu_airgap.gpu_airgap_node", tmp=tmp_path)
    assert doc.returncode == 0, doc.stderr
    module = json.loads(doc.stdout)["airgap.gpu_airgap.gpu_airgap_node"]
    options = module["doc"]["options"]
    assert options["state"]["choices"] == ["present", "configured", "restarted", "absent", "unconfigured"]
    assert options["zipapp"]["required"] is True and options["bundle"]["type"] == "str"
    assert "oci://" in module["examples"] and "engines_changed" in module["return"]


def test_ansible_doc_shows_the_roles_variables_from_its_argument_specs(tmp_path: Path) -> None:
    doc = _ansible_doc("-t", "role", "--json", "airgap.gpu_airgap.gpu_airgap", tmp=tmp_path)
    assert doc.returncode == 0, doc.stderr
    main = json.loads(doc.stdout)["airgap.gpu_airgap.gpu_airgap"]["entry_points"]["main"]
    assert main["options"]["gpu_airgap_transport"]["choices"] == ["copy", "http", "oci"]
    defaults = (
        ANSIBLE_DIR / "collections/ansible_collections/airgap/gpu_airgap/roles/gpu_airgap/defaults/main.yml"
    ).read_text()
    for name in main["options"]:
        assert f"\n{name}:" in defaults, f"{name} is documented but has no default in defaults/main.yml"


def test_the_collection_builds_and_installs_offline_and_its_module_is_documented_from_there(
    tmp_path: Path,
) -> None:
    galaxy = str(Path(sys.executable).with_name("ansible-galaxy"))
    env = {**os.environ, "ANSIBLE_HOME": str(tmp_path / "ansible-home"), "ANSIBLE_NOCOLOR": "1"}
    source = COLLECTIONS / "ansible_collections/airgap/gpu_airgap"
    built = subprocess.run(
        [galaxy, "collection", "build", str(source), "--output-path", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (tarball,) = tmp_path.glob("airgap-gpu_airgap-*.tar.gz")
    installed = subprocess.run(
        [galaxy, "collection", "install", "--offline", str(tarball), "-p", str(tmp_path / "site")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    here = tmp_path / "site/ansible_collections/airgap/gpu_airgap"
    assert (here / "roles/gpu_airgap/meta/argument_specs.yml").is_file() and (
        here / "plugins/modules/gpu_airgap_node.py"
    ).is_file()
    doc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-doc")), "airgap.gpu_airgap.gpu_airgap_node"],
        env={**env, "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert doc.returncode == 0 and str(here) in doc.stdout, doc.stdout + doc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "value"), [("gpu_airgap_transport", "ftp"), ("gpu_airgap_distro", "k9s")]
)
def test_the_argument_specs_refuse_a_bad_variable_before_any_task_runs(
    variable: str, value: str, deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    fleet = Fleet(tmp_path, deb_bundle, operator_key.public)
    before = fleet.digests()
    play = fleet.play("site.yml", "-e", f"{variable}={value}")
    assert play.returncode != 0
    assert variable in play.output and value in play.output, play.output[-2000:]
    assert not [r for r in play.results if r["task"] == ROLE_TASK]
    assert fleet.digests() == before


class _CountingHandler(SimpleHTTPRequestHandler):
    requests: List[str]

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path, List[str]]]:
    """A plain HTTP server on 127.0.0.1 serving ``tmp/www``: (base URL, its directory, the paths asked for)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = type("Handler", (_CountingHandler,), {"requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(www)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", www, handler.requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _cached(fleet: Fleet, host: str) -> List[str]:
    return sorted(p.name for p in (fleet.roots[host] / "var/cache/gpu-airgap/fleet").iterdir())


@pytest.mark.slow
def test_http_transport_nodes_download_the_pinned_bundle_once_and_install_it(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path, http_server: tuple[str, Path, List[str]]
) -> None:
    base, www, requests = http_server
    (www / "nvct.tar.zst").write_bytes(deb_bundle.read_bytes())
    fleet = Fleet(tmp_path / "fleet", deb_bundle, operator_key.public, TWO_HOSTS)
    extra = ("-e", "gpu_airgap_transport=http", "-e", f"gpu_airgap_bundle_url={base}/nvct.tar.zst")
    first = fleet.play("site.yml", *extra)
    assert first.returncode == 0, first.output[-3000:]
    assert requests == ["/nvct.tar.zst"] * len(TWO_HOSTS)
    for host in TWO_HOSTS:
        assert dpkg_versions(fleet.roots[host]) == dict.fromkeys(TOOLKIT, "1.17.8-1"), host
        assert first.task(host, "Fetch the bundle on the node (transport http)")["result"]["changed"] is True
    second = fleet.play("site.yml", *extra)
    assert second.returncode == 0 and second.changed() == dict.fromkeys(TWO_HOSTS, 0), second.stats
    assert requests == ["/nvct.tar.zst"] * len(TWO_HOSTS), "an unchanged bundle was downloaded again"


@pytest.mark.slow
def test_http_transport_refuses_a_served_bundle_that_is_not_the_controllers(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path, http_server: tuple[str, Path, List[str]]
) -> None:
    base, www, _ = http_server
    served = bytearray(deb_bundle.read_bytes())
    served[-100] ^= 0xFF
    (www / "nvct.tar.zst").write_bytes(bytes(served))
    fleet = Fleet(tmp_path / "fleet", deb_bundle, operator_key.public, TWO_HOSTS)
    before = fleet.digests()
    play = fleet.play(
        "site.yml", "-e", "gpu_airgap_transport=http", "-e", f"gpu_airgap_bundle_url={base}/nvct.tar.zst"
    )
    assert play.returncode != 0
    assert (
        "checksum"
        in play.task("node1", "Fetch the bundle on the node (transport http)")["result"]["msg"].lower()
    )
    assert not [
        r for r in play.results if r["task"] == ROLE_TASK
    ]  # the canary failed: nothing installed anywhere
    assert fleet.digests()["node2"] == before["node2"]


@pytest.mark.slow
def test_oci_transport_nodes_pull_by_digest_install_and_keep_no_bundle_copy(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    with Registry(tmp_path / "registry") as registry:
        pushed = run_cli(
            "bundle",
            "push",
            str(deb_bundle),
            registry.ref("fleet/nvct:1.17.8"),
            "--keyring",
            str(operator_key.public),
            "--json",
        )
        assert pushed.exit_code == 0, pushed.stderr
        ref = registry.ref(f"fleet/nvct@{json.loads(pushed.stdout)['digest']}")
        fleet = Fleet(tmp_path / "fleet", deb_bundle, operator_key.public, TWO_HOSTS)
        extra = (
            "-e",
            "gpu_airgap_transport=oci",
            "-e",
            f"gpu_airgap_bundle_ref={ref}",
            "-e",
            "gpu_airgap_distro=containerd",
        )
        first = fleet.play("site.yml", *extra)
        assert first.returncode == 0, first.output[-3000:]
        for host in TWO_HOSTS:
            assert dpkg_versions(fleet.roots[host]) == dict.fromkeys(TOOLKIT, "1.17.8-1"), host
            assert first.task(host, ROLE_TASK)["result"]["result"]["outcome"] == "installed"
            assert _cached(fleet, host) == ["gpu-airgap-node.pyz", "operator.asc"], (
                "the bundle went over the connection"
            )
        second = fleet.play("site.yml", *extra)
        assert second.returncode == 0 and second.changed() == dict.fromkeys(TWO_HOSTS, 0), second.stats


@pytest.mark.slow
def test_oci_transport_pulls_from_a_registry_that_needs_the_operators_credentials(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with registry_with_login(tmp_path) as (registry, config):
        monkeypatch.setenv("DOCKER_CONFIG", str(config.directory))
        pushed = run_cli(
            "bundle",
            "push",
            str(deb_bundle),
            registry.ref("fleet/auth:1"),
            "--keyring",
            str(operator_key.public),
            "--json",
        )
        assert pushed.exit_code == 0, pushed.stderr
        monkeypatch.setenv(
            "DOCKER_CONFIG", str(tmp_path / "no-docker-config")
        )  # the nodes have no credentials of their own
        ref = registry.ref(f"fleet/auth@{json.loads(pushed.stdout)['digest']}")
        fleet = Fleet(tmp_path / "fleet", deb_bundle, operator_key.public, TWO_HOSTS)
        extra = ("-e", "gpu_airgap_transport=oci", "-e", f"gpu_airgap_bundle_ref={ref}")
        before = fleet.digests()
        refused = fleet.play("site.yml", *extra)
        assert refused.returncode != 0
        assert (
            "401" in refused.task("node1", ROLE_TASK)["result"]["msg"]
            or "credentials" in refused.task("node1", ROLE_TASK)["result"]["msg"]
        )
        assert fleet.digests()["node2"] == before["node2"]  # the canary failed: nothing else touched
        done = fleet.play(
            "site.yml", *extra, "-e", f"gpu_airgap_registry_auth={config.directory / 'config.json'}"
        )
    assert done.returncode == 0, done.output[-3000:]
    for host in TWO_HOSTS:
        assert dpkg_versions(fleet.roots[host]) == dict.fromkeys(TOOLKIT, "1.17.8-1"), host
        secret = fleet.roots[host] / "var/cache/gpu-airgap/fleet/docker/config.json"
        assert secret.stat().st_mode & 0o777 == 0o600 and secret.parent.stat().st_mode & 0o777 == 0o700
