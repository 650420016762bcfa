"""Progress on a terminal for bundle build, bundle verify, publish and install; retries shown without --debug.

Issue 18 item 18. The commands run as real subprocesses whose stderr is a pseudo-terminal (what a
user's terminal is) or a pipe (what a log or a script sees): the meter draws only on the first.
"""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

from plumbing.progress import NoMeter, TerminalMeter, terminal_meter
from tests.cli_runner import bundle_build_argv, install_argv, run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import seed_dpkg_root
from tests.upstream import Fault, UpstreamServer, UpstreamTree

ROOT = Path(__file__).resolve().parent.parent


def _run(argv: List[str], *, terminal: bool) -> Tuple[int, str]:
    """Run ``gpu-airgap ARGV`` with stderr on a pseudo-terminal (or a pipe); return its exit code and stderr."""
    command = [sys.executable, "-m", "mirror", *argv]
    env = {**os.environ, "TYPER_USE_RICH": "0"}
    if not terminal:
        done = subprocess.run(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
        )
        return done.returncode, done.stderr.decode()
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL
        )
        os.close(slave)
        chunks: List[bytes] = []
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                proc.kill()
                break
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=120)
    finally:
        os.close(master)
    return code, b"".join(chunks).decode(errors="replace")


def test_the_meter_draws_one_line_with_the_percentage_and_ends_it() -> None:
    stream = io.StringIO()
    ticks = iter([0.0, 0.05, 0.2, 0.3, 0.4])
    meter = TerminalMeter("verifying", stream, every=0.1, clock=lambda: next(ticks))
    meter.start(4 << 20)
    meter.advance(1 << 20)  # 0.05 s after the start: not drawn
    meter.advance(1 << 20)
    meter.close()
    text = stream.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n")
    assert "verifying:   0% (0.0 of 4.0 MiB)" in text and "verifying:  50% (2.0 of 4.0 MiB)" in text
    assert "25%" not in text


def test_nothing_is_drawn_off_a_terminal_or_when_quiet() -> None:
    assert isinstance(terminal_meter("x", stream=io.StringIO()), NoMeter)
    master, slave = pty.openpty()
    try:
        with os.fdopen(slave, "w", closefd=False) as tty:
            assert isinstance(terminal_meter("x", stream=tty), TerminalMeter)
            assert isinstance(terminal_meter("x", stream=tty, quiet=True), NoMeter)
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.slow
def test_bundle_verify_shows_progress_on_a_terminal_only(deb_bundle: Path, operator_key: TestKey) -> None:
    argv = ["bundle", "verify", str(deb_bundle), "--keyring", str(operator_key.public)]
    code, shown = _run(argv, terminal=True)
    assert code == 0, shown
    assert "\rverifying: 100% (" in shown
    code, logged = _run(argv, terminal=False)
    assert code == 0 and "verifying:" not in logged and "\r" not in logged


@pytest.mark.slow
def test_bundle_build_shows_progress_on_a_terminal_only(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    def build(name: str, terminal: bool) -> Tuple[int, str]:
        return _run(
            bundle_build_argv(deb_mirror, operator_key, tmp_path / name, version=None),
            terminal=terminal,
        )

    code, shown = build("a.tar.zst", True)
    assert code == 0, shown
    assert "\rwriting the bundle: 100% (" in shown
    code, logged = build("b.tar.zst", False)
    assert code == 0 and "writing the bundle" not in logged


@pytest.mark.slow
def test_publish_shows_progress_on_a_terminal_only(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    def publish(name: str, terminal: bool) -> Tuple[int, str]:
        return _run(
            [
                "mirror",
                "publish",
                "--mirror",
                str(deb_mirror),
                "--output",
                str(tmp_path / name),
                "--base-url",
                "http://m.internal/nvct",
                "--sign-key",
                operator_key.fingerprint,
                "--gnupghome",
                str(operator_key.home),
            ],
            terminal=terminal,
        )

    code, shown = publish("a", True)
    assert code == 0, shown
    assert "\rpublishing: 100% (" in shown
    code, logged = publish("b", False)
    assert code == 0 and "publishing" not in logged


@pytest.mark.slow
def test_install_shows_the_bundle_check_on_a_terminal(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    root = tmp_path / "node"
    seed_dpkg_root(root)
    argv = [
        *install_argv(deb_bundle, operator_key, root),
        "--runtime",
        "none",
        "--dry-run",
    ]
    code, shown = _run(argv, terminal=True)
    assert code == 0, shown
    assert "\rverifying the bundle: 100% (" in shown
    code, logged = _run(argv, terminal=False)
    assert code == 0 and "verifying the bundle" not in logged


def test_a_retried_download_says_so_without_debug(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree
) -> None:
    upstream_server.inject("/stable/deb/amd64/InRelease", Fault.fail_first(1))
    result = run_cli(
        "mirror",
        "plan",
        "--upstream",
        upstream_server.url,
        "--keyring",
        str(upstream_tree.public_key),
        "--version",
        "1.17.8",
        "--format",
        "deb",
        "--arch",
        "amd64",
    )
    assert result.exit_code == 0, result.stderr
    url = upstream_server.url_for("/stable/deb/amd64/InRelease")
    assert f"warning: {url}: Service Unavailable; retry 1 of 4 in 0.5 s" in result.stderr.splitlines()
