"""Network trouble during ``mirror sync``: metadata resumes like packages, and every failure is one clean sentence.

Loopback only: a closed port on 127.0.0.1, the local upstream with injected faults, and a host
name that cannot resolve looked up inside an empty network namespace (``unshare --net``), so no
query leaves the machine.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mirror.errors import FetchError
from mirror.sync.http import Downloader
from plumbing.errors import ExitCode
from tests.cli_runner import CliResult, run_cli, run_mirror_sync
from tests.upstream import Fault, UpstreamServer, UpstreamTree

ROOT = Path(__file__).resolve().parent.parent


def _sync(tree: UpstreamTree, upstream: str, dest: Path, *extra: str) -> CliResult:
    return run_mirror_sync(dest, upstream, tree.public_key, "--quiet", *extra)


def _clean_sentence(stderr: str) -> str:
    """The one error line, checked: balanced parentheses, no clause said twice, no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    line = lines[0]
    assert line.startswith("gpu-airgap: error: could not download "), line
    assert line.count("(") == line.count(")"), f"unbalanced parentheses: {line}"
    words = re.findall(r"[a-z]+", line.lower())
    triples = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    assert len(triples) == len(set(triples)), f"a clause repeats: {line}"
    return line


def test_a_dropped_metadata_transfer_resumes_where_it_stopped(
    upstream_tree: UpstreamTree, upstream_server: UpstreamServer, tmp_path: Path
) -> None:
    inrelease = "/stable/deb/amd64/InRelease"
    index = "/stable/deb/amd64/Packages.xz"
    upstream_server.inject(inrelease, Fault.drop_after(500))
    upstream_server.inject(index, Fault.drop_after(1500))
    result = _sync(upstream_tree, upstream_server.url, tmp_path / "mirror")
    assert result.exit_code == 0, result.stderr
    for path in (inrelease, index):
        size = (upstream_tree.root / path.lstrip("/")).stat().st_size
        records = [r for r in upstream_server.log if r.path == path]
        assert records[0].range is None and records[1].range is not None, [r.range for r in records]
        assert all(r.headers.get("if-range") for r in records[1:])  # resumed only onto the same version
        assert sum(r.bytes_sent for r in records) == size  # no byte fetched twice
    assert run_cli("mirror", "verify", "--mirror", str(tmp_path / "mirror")).exit_code == 0


def test_a_refused_connection_is_one_sentence_with_what_to_check(
    upstream_tree: UpstreamTree, tmp_path: Path, backoff: list[float]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the probe is: connections are refused
    result = _sync(upstream_tree, f"http://127.0.0.1:{port}/libnvidia-container", tmp_path / "mirror")
    assert result.exit_code == ExitCode.NETWORK
    line = _clean_sentence(result.stderr)
    assert f"127.0.0.1:{port} refused the connection (tried 5 times); check --upstream" in line
    assert "https_proxy" in line
    assert backoff == [0.5, 1.0, 2.0, 4.0]  # four waits, doubling (recorded: the test does not wait them)


@pytest.mark.parametrize(
    ("fault", "ending"),
    [
        (Fault.error(503), "the server answered HTTP 503 Service Unavailable (tried 5 times)"),
        (
            Fault.drop_after(0),
            "the connection to 127.0.0.1:{port} dropped before the end of the file (tried 5 times); check --upstream",
        ),
        (Fault.not_found(), "the server answered HTTP 404 Not Found"),
    ],
    ids=["503", "dropped", "404"],
)
def test_each_failure_of_a_metadata_download_is_one_clean_sentence(
    upstream_server: UpstreamServer, fault: Fault, ending: str
) -> None:
    upstream_server.inject("/stable/deb/amd64/InRelease", fault)
    url = upstream_server.url_for("/stable/deb/amd64/InRelease")
    sleeps: list[float] = []
    with Downloader(sleep=sleeps.append) as downloader, pytest.raises(FetchError) as err:
        downloader.get(url)
    line = _clean_sentence(f"gpu-airgap: error: {err.value}")
    assert f"could not download {url}: " + ending.format(port=upstream_server.port) in line
    assert len(sleeps) == (0 if "404" in ending else 4)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="an empty network namespace needs root"
)
def test_a_host_name_that_does_not_resolve_is_not_retried_and_names_the_way_out(
    upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [
            "unshare",
            "--net",
            sys.executable,
            "-m",
            "mirror",
            "mirror",
            "sync",
            "--dest",
            str(tmp_path / "mirror"),
            "--upstream",
            "http://nvidia.invalid/libnvidia-container",
            "--keyring",
            str(upstream_tree.public_key),
            "--format",
            "deb",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == ExitCode.NETWORK, proc.stderr
    line = _clean_sentence(proc.stderr)
    assert "the host name nvidia.invalid does not resolve; check --upstream, and set https_proxy" in line
    assert "tried" not in line  # one attempt: a retried failure says "(tried 5 times)"
