"""``mirror publish``: a tree real apt-get and dnf accept, served by the loopback server and by nginx.

Mirrors come from a real ``mirror sync`` of the local upstream (``synced_mirror``: 1.17.8, deb/amd64
and rpm/x86_64; ``full_mirror`` below: every package upstream's indexes list). Trees are published
once per module with the throwaway operator key and checked with sandboxed apt-get / dnf, gpg and
createrepo_c's own output; tampering happens on copies, because published files are hard links
into the shared mirror.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.disk import store
from mirror.publish.swap import MARKER
from plumbing.gpg import Keyring
from tests.cli_runner import CliResult, run_cli
from tests.clock import clock_moved_on
from tests.gpgkeys import TestKey
from tests.node_fixtures import build_rpm
from tests.pkg_clients import apt, dnf_with_repo, new_apt_sandbox
from tests.upstream import UpstreamServer

KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
PINNED = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
_EPOCH: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _one_epoch(operator_key: TestKey) -> Iterator[None]:
    """One SOURCE_DATE_EPOCH for every publish of the module, taken after the operator key was made."""
    _EPOCH["value"] = str(int(time.time()))
    yield
    _EPOCH.clear()  # other modules that import publish() use the clock


def publish(mirror: Path, out: Path, base_url: str, *extra: str, key: TestKey | None = None) -> CliResult:
    signing = ["--sign-key", key.fingerprint, "--gnupghome", str(key.home)] if key is not None else []
    if "value" in _EPOCH:  # this module's publishes share one SOURCE_DATE_EPOCH; others use the clock
        os.environ["SOURCE_DATE_EPOCH"] = _EPOCH["value"]
    try:
        return run_cli(
            "mirror",
            "publish",
            "--mirror",
            str(mirror),
            "--output",
            str(out),
            "--base-url",
            base_url,
            *signing,
            *extra,
        )
    finally:
        os.environ.pop("SOURCE_DATE_EPOCH", None)


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones too) with its sha256."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamServer]:
    """The loopback server over an empty web root; trees are published into ``<root>/nvct``."""
    root = tmp_path_factory.mktemp("web")
    with UpstreamServer(root) as server:
        yield server


@pytest.fixture(scope="module")
def published(synced_mirror: Path, operator_key: TestKey, site: UpstreamServer) -> Path:
    out = site.root / "nvct"
    result = publish(synced_mirror, out, f"{site.url}/nvct/", "--json", key=operator_key)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert [r["key"] for r in report["repos"]] == ["stable/deb/amd64", "stable/rpm/x86_64"]
    assert report["signer"] == operator_key.fingerprint and not report["preserved_upstream"]
    assert report["base_url"] == f"{site.url}/nvct" and report["linked"] == 8  # every package hard-linked
    return out


def apt_for(tree: Path, tmp_path: Path) -> Path:
    """A sandbox set up with the node's documented commands: the dearmored ``gpgkey`` and the published ``.list``."""
    sandbox = tmp_path / "apt"
    keyring = sandbox / "nvidia-container-toolkit-keyring.gpg"
    listing = (tree / "stable/deb/nvidia-container-toolkit.list").read_text().replace(KEYRING, str(keyring))
    new_apt_sandbox(sandbox, (tree / "gpgkey").read_bytes(), listing, keyring_name=keyring.name)
    return sandbox


def download_pinned(sandbox: Path) -> subprocess.CompletedProcess[str]:
    return apt(sandbox, "download", *(f"{name}=1.17.8-1" for name in PINNED), cwd=sandbox / "dl")


# -- the tree and its contract files -------------------------------------------------------------


def test_tree_has_upstreams_layout_and_exactly_the_synced_packages(
    published: Path, synced_mirror: Path, site: UpstreamServer
) -> None:
    files = set(tree_digest(published))
    state = store.MirrorState.load(synced_mirror)
    packages = {p.path for r in state.repos for p in r.packages}
    assert {f for f in files if f.endswith((".deb", ".rpm"))} == packages
    assert {
        "gpgkey",
        "INSTALL.md",
        "nginx.conf.example",
        MARKER,
        "stable/deb/nvidia-container-toolkit.list",
        "stable/rpm/nvidia-container-toolkit.repo",
        "stable/deb/amd64/InRelease",
        "stable/deb/amd64/Packages",
        "stable/deb/amd64/Packages.xz",
        "stable/rpm/x86_64/repodata/repomd.xml",
        "stable/rpm/x86_64/repodata/repomd.xml.asc",
    } <= files
    assert not any(
        f.startswith(("experimental/", ".gpu-airgap/")) for f in files
    )  # only what the mirror holds
    for path in packages:  # hard links into the mirror: no copy of the bytes
        assert (published / path).stat().st_ino == (synced_mirror / path).stat().st_ino
    base = f"{site.url}/nvct"
    assert (published / "stable/deb/nvidia-container-toolkit.list").read_text() == (
        f"deb [signed-by={KEYRING}] {base}/stable/deb/$(ARCH) /\n"
    )
    assert (published / "stable/rpm/nvidia-container-toolkit.repo").read_text() == (
        f"[nvidia-container-toolkit]\nname=nvidia-container-toolkit\nbaseurl={base}/stable/rpm/$basearch\n"
        f"repo_gpgcheck=1\ngpgcheck=0\nenabled=1\ngpgkey={base}/gpgkey\npriority=10\n"
    )
    assert (
        (published / "stable/deb/nvidia-container-toolkit.pref")
        .read_text()
        .endswith(
            "Package: nvidia-container-toolkit* libnvidia-container*\nPin: origin 127.0.0.1\n"
            "Pin-Priority: 990\n"
        )
    )
    install = (published / "INSTALL.md").read_text()
    assert f"curl -fsSL {base}/gpgkey | sudo gpg --batch --yes --dearmor -o {KEYRING}" in install
    assert f"{base}/stable/deb/nvidia-container-toolkit.list -o /etc/apt/sources.list.d/" in install
    assert f"{base}/stable/rpm/nvidia-container-toolkit.repo -o /etc/yum.repos.d/" in install
    assert f"{base}/stable/deb/nvidia-container-toolkit.pref -o /etc/apt/preferences.d/" in install
    assert "sudo apt-get update" in install and "sudo dnf -y makecache" in install


def test_gpgkey_is_the_operator_key_and_it_verifies_both_indexes(
    published: Path, operator_key: TestKey
) -> None:
    with Keyring.open([published / "gpgkey"]) as ring:
        assert ring.fingerprints == {operator_key.fingerprint}
        text = ring.verify_clearsigned((published / "stable/deb/amd64/InRelease").read_bytes()).text
        repodata = published / "stable/rpm/x86_64/repodata"
        ring.verify_detached(
            (repodata / "repomd.xml").read_bytes(), (repodata / "repomd.xml.asc").read_bytes()
        )
    for name in ("Packages", "Packages.xz"):
        data = (published / "stable/deb/amd64" / name).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data):>16} {name}" in text
        assert f" {hashlib.sha512(data).hexdigest()} {len(data):>16} {name}" in text
    assert "Label: gpu-airgap internal mirror" in text and "Codename: stable" in text


def test_two_publishes_with_one_source_date_epoch_are_byte_identical(
    synced_mirror: Path, operator_key: TestKey, site: UpstreamServer, tmp_path: Path
) -> None:
    # Both publishes here, back to back, into the same path: nothing but SOURCE_DATE_EPOCH and the
    # inputs may decide the bytes (not the path, not what other tests did to a shared tree meanwhile).
    out = tmp_path / "nvct"
    assert publish(synced_mirror, out, f"{site.url}/nvct", key=operator_key).exit_code == 0
    first = tree_digest(out)
    with clock_moved_on():  # a day later, without waiting for it
        again = publish(synced_mirror, out, f"{site.url}/nvct", key=operator_key)
    assert again.exit_code == 0, again.stderr
    second = tree_digest(out)
    assert first == second, [p for p in sorted(set(first) | set(second)) if first.get(p) != second.get(p)]
    assert "stable/rpm/x86_64/repodata/repomd.xml.asc" in first and "stable/deb/amd64/InRelease" in first


# -- real clients --------------------------------------------------------------------------------


def test_real_apt_get_updates_and_downloads_the_pinned_release(
    published: Path, site: UpstreamServer, tmp_path: Path
) -> None:
    site.reset()
    sandbox = apt_for(published, tmp_path)
    update = apt(sandbox, "update")
    assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, update.stdout + update.stderr
    assert {"/nvct/stable/deb/amd64/InRelease", "/nvct/stable/deb/amd64/Packages.xz"} <= {
        r.path for r in site.log
    }
    download = download_pinned(sandbox)
    assert download.returncode == 0, download.stdout + download.stderr
    for name in PINNED:
        deb = f"{name}_1.17.8-1_amd64.deb"
        assert (sandbox / "dl" / deb).read_bytes() == (published / "stable/deb/amd64" / deb).read_bytes()


def test_real_dnf_makecache_accepts_the_yum_repo_with_repo_gpgcheck(
    published: Path, site: UpstreamServer, tmp_path: Path
) -> None:
    site.reset()
    repo = (published / "stable/rpm/nvidia-container-toolkit.repo").read_text()
    made = dnf_with_repo(tmp_path / "dnf", repo, "makecache")
    assert made.returncode == 0, made.stderr
    paths = {r.path for r in site.log}
    assert {"/nvct/gpgkey", "/nvct/stable/rpm/x86_64/repodata/repomd.xml.asc"} <= paths
    query = dnf_with_repo(
        tmp_path / "dnf", repo, "repoquery", "--available", "--repo", "nvidia-container-toolkit"
    )
    assert query.returncode == 0, query.stderr
    assert {f"{n}-0:1.17.8-1.x86_64" for n in PINNED} <= set(query.stdout.split())


def competing_apt_repo(root: Path, version: str) -> None:
    """A flat repository like CUDA's (Origin NVIDIA, Label NVIDIA CUDA) offering a newer toolkit; its index only."""
    root.mkdir(parents=True)
    packages = (
        f"Package: nvidia-container-toolkit\nVersion: {version}\nArchitecture: amd64\n"
        f"Filename: ./nvidia-container-toolkit_{version}_amd64.deb\nSize: 1\n"
        f"SHA256: {hashlib.sha256(b'x').hexdigest()}\nDescription: a competitor\n"
    ).encode()
    (root / "Packages").write_bytes(packages)
    (root / "Release").write_text(
        "Origin: NVIDIA\nLabel: NVIDIA CUDA\nArchitectures: amd64\nSHA256:\n"
        f" {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n"
    )


def test_real_apt_get_takes_the_toolkit_from_the_mirror_over_a_newer_cuda_repo_only_with_the_published_pin(
    published: Path, site: UpstreamServer, tmp_path: Path
) -> None:
    # the competitor is served by the same loopback server under another host name (apt pins by host)
    competing_apt_repo(site.root / "cuda", "1.99.0-1")
    sandbox = apt_for(published, tmp_path)
    with (sandbox / "sources.list").open("a") as sources:
        sources.write(f"deb [trusted=yes] http://localhost:{site.port}/cuda/ /\n")
    # CUDA's own pin (Package: * at 600 for Label NVIDIA CUDA), as the CUDA install guide places it
    cuda_pin = Path(__file__).parent / "data/fixtures/node-repos/cuda-ubuntu2204/etc/apt/preferences.d"
    shutil.copy(cuda_pin / "cuda-repository-pin-600", sandbox / "preferences.d/cuda-repository-pin-600")
    update = apt(sandbox, "update")
    assert update.returncode == 0, update.stdout + update.stderr

    def chosen() -> str:  # the candidate apt would install or upgrade to, by the URL it would fetch
        uris = apt(sandbox, "download", "--print-uris", "nvidia-container-toolkit")
        assert uris.returncode == 0, uris.stdout + uris.stderr
        return uris.stdout.split("'")[1].removeprefix(site.url).replace(f"localhost:{site.port}", "localhost")

    assert chosen() == "http://localhost/cuda/./nvidia-container-toolkit_1.99.0-1_amd64.deb"  # unpinned
    shutil.copy(published / "stable/deb/nvidia-container-toolkit.pref", sandbox / "preferences.d")
    assert chosen() == "/nvct/stable/deb/amd64/./nvidia-container-toolkit_1.17.8-1_amd64.deb"
    # what docs/node.md advises where there is no pin of ours: never the toolkit from that origin
    (sandbox / "preferences.d/nvidia-container-toolkit.pref").unlink()
    assert chosen().startswith("http://localhost/cuda/")
    (sandbox / "preferences.d/no-toolkit-from-cuda").write_text(
        "Package: nvidia-container-toolkit* libnvidia-container*\nPin: origin localhost\nPin-Priority: -1\n"
    )
    assert chosen() == "/nvct/stable/deb/amd64/./nvidia-container-toolkit_1.17.8-1_amd64.deb"


def test_real_dnf_takes_the_toolkit_from_the_mirror_over_a_newer_cuda_repo_by_the_published_priority(
    published: Path, site: UpstreamServer, tmp_path: Path
) -> None:
    cuda = site.root / "cuda-rpm"
    cuda.mkdir()
    rpm = build_rpm(tmp_path / "build", "nvidia-container-toolkit", "1.99.0-1", files=False)
    shutil.copy(rpm, cuda / rpm.name)
    subprocess.run(["createrepo_c", "-q", str(cuda)], check=True)
    # NVIDIA's cuda-rhel9.repo section, pointed at the loopback server under another host name
    competitor = (
        f"\n[cuda-rhel9-x86_64]\nname=cuda-rhel9-x86_64\nbaseurl=http://localhost:{site.port}/cuda-rpm\n"
    )
    competitor += "enabled=1\ngpgcheck=0\n"
    ours = (published / "stable/rpm/nvidia-container-toolkit.repo").read_text()

    def chosen(
        repo: str, work: str
    ) -> str:  # what dnf would install or upgrade to, by the URL it would fetch
        found = dnf_with_repo(
            tmp_path / work, repo + competitor, "download", "--url", "nvidia-container-toolkit"
        )
        assert found.returncode == 0, found.stderr
        return found.stdout.strip().replace(f"localhost:{site.port}", "localhost").removeprefix(site.url)

    assert chosen(ours.replace("priority=10\n", ""), "unpinned") == (
        "http://localhost/cuda-rpm/nvidia-container-toolkit-1.99.0-1.x86_64.rpm"
    )
    assert chosen(ours, "pinned") == "/nvct/stable/rpm/x86_64/nvidia-container-toolkit-1.17.8-1.x86_64.rpm"


@pytest.mark.parametrize(
    ("victim", "offset", "refusal"),
    [
        ("stable/deb/amd64/Packages.xz", 100, "Hash Sum mismatch"),
        ("stable/deb/amd64/InRelease", 200, "BADSIG"),
        ("stable/deb/amd64/nvidia-container-toolkit_1.17.8-1_amd64.deb", 600, "Hash Sum mismatch"),
    ],
    ids=["index", "inrelease", "package"],
)
def test_a_changed_byte_in_a_published_index_or_package_makes_apt_refuse(
    published: Path, site: UpstreamServer, tmp_path: Path, victim: str, offset: int, refusal: str
) -> None:
    copy = tmp_path / "web" / "nvct"
    shutil.copytree(published, copy)  # real copies: the published files are hard links into the mirror
    data = bytearray((copy / victim).read_bytes())
    data[offset] ^= 0x01
    (copy / victim).write_bytes(bytes(data))
    with UpstreamServer(copy.parent) as server:
        listing = copy / "stable/deb/nvidia-container-toolkit.list"
        listing.write_text(listing.read_text().replace(site.url, server.url))
        sandbox = apt_for(copy, tmp_path)
        update = apt(sandbox, "update")
        result = download_pinned(sandbox) if update.returncode == 0 else update
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert refusal in output, output
    assert not (sandbox / "dl" / Path(victim).name).exists()


@pytest.mark.slow
def test_real_nginx_serves_the_tree_with_the_generated_server_block(
    synced_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    port = _free_port()
    out = tmp_path / "srv" / "nvct"
    result = publish(synced_mirror, out, f"http://127.0.0.1:{port}/gpu/nvct", key=operator_key)
    assert result.exit_code == 0, result.stderr
    block = (out / "nginx.conf.example").read_text().replace("listen 80;", f"listen 127.0.0.1:{port};")
    with _nginx(tmp_path / "nginx", block, port):
        sandbox = apt_for(out, tmp_path)
        update = apt(sandbox, "update")
        assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, (
            update.stdout + update.stderr
        )
        download = download_pinned(sandbox)
        assert download.returncode == 0, download.stdout + download.stderr
        made = dnf_with_repo(
            tmp_path / "dnf", (out / "stable/rpm/nvidia-container-toolkit.repo").read_text(), "makecache"
        )
        assert made.returncode == 0, made.stderr
        hidden = subprocess.run(
            [
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                f"http://127.0.0.1:{port}/gpu/nvct/{MARKER}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert hidden.stdout == "403"
    assert sorted(p.name for p in (sandbox / "dl").iterdir()) == sorted(
        f"{n}_1.17.8-1_amd64.deb" for n in PINNED
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _nginx:
    """nginx with a private config holding ``server_block``, as root (workers as root: tmp dirs are 0700)."""

    def __init__(self, work: Path, server_block: str, port: int) -> None:
        work.mkdir(parents=True)
        user = "user root;\n" if os.geteuid() == 0 else ""
        (work / "nginx.conf").write_text(
            f"{user}daemon off;\nworker_processes 1;\npid {work}/nginx.pid;\nerror_log {work}/error.log warn;\n"
            f"events {{ worker_connections 64; }}\nhttp {{\n    access_log off;\n    client_body_temp_path {work}/body;\n"
            f"    proxy_temp_path {work}/proxy;\n    fastcgi_temp_path {work}/fastcgi;\n    uwsgi_temp_path {work}/uwsgi;\n"
            f"    scgi_temp_path {work}/scgi;\n{server_block}}}\n"
        )
        self.argv = ["nginx", "-c", str(work / "nginx.conf"), "-p", str(work)]
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _nginx:
        test = subprocess.run([*self.argv, "-t"], capture_output=True, text=True)
        assert test.returncode == 0, test.stderr
        self.proc = subprocess.Popen(self.argv, stderr=subprocess.PIPE)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.proc.kill()
        raise AssertionError(f"nginx did not start: {self.proc.stderr.read() if self.proc.stderr else b''!r}")

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(timeout=10)
