"""Issue 16 item 2: the DaemonSet's tools image made here from Debian's busybox-static, carried as a file or pushed.

The image is checked with tools that are not ours: ``umoci unpack`` turns the written OCI layout into
a root filesystem whose busybox runs the applets the ``--tools host`` wrapper uses, and ``skopeo
inspect`` reads the archive and the copy pushed to the real ``docker-registry`` (skopeo runs in a node
view whose ``/var/lib`` is private, as in tests/live/image.py, so it leaves no cache on the machine).
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.cli_runner import run_cli
from tests.live.nodeview import node_view_argv
from tests.oci_registry import Registry

BUSYBOX = Path("/bin/busybox")
pytestmark = pytest.mark.skipif(
    not BUSYBOX.exists(), reason="needs busybox-static (scripts/install-system-tools)"
)


def _skopeo_inspect(tmp: Path, *args: str) -> Dict[str, Any]:
    argv = node_view_argv(
        tmp / "empty-node", tmp / "view", ["skopeo", "inspect", *args], layers=("/var/lib",)
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: Dict[str, Any] = json.loads(done.stdout)
    return result


def _unpack(archive: Path, tag: str, dest: Path) -> Path:
    layout = dest / "layout"
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    done = subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{tag}", str(dest / "bundle")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dest / "bundle/rootfs"


def test_busybox_image_unpacks_with_umoci_and_runs_what_the_host_wrapper_needs(tmp_path: Path) -> None:
    archive = tmp_path / "tools.tar"
    done = run_cli("fleet", "image", "--output", str(archive), "--tag", "tools:1")
    assert done.exit_code == 0, done.stderr
    rootfs = _unpack(archive, "tools:1", tmp_path / "unpacked")
    assert (rootfs / "bin/busybox").read_bytes() == BUSYBOX.read_bytes()
    for applet in ("sh", "wget", "cp", "chroot", "mkdir", "mv"):
        assert (rootfs / "bin" / applet).is_symlink(), applet
    # chroot into the unpacked image: only the image's files are there, so this proves it is self-contained
    ran = subprocess.run(
        ["chroot", str(rootfs), "/bin/sh", "-c", "mkdir -p /tmp/x && cp /bin/busybox /tmp/x/ && echo ok"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (ran.returncode, ran.stdout) == (0, "ok\n"), ran.stderr
    inspected = _skopeo_inspect(tmp_path, f"oci-archive:{archive}:tools:1")
    assert (
        inspected["Architecture"] == "amd64" and inspected["Os"] == "linux" and len(inspected["Layers"]) == 1
    )


def test_the_same_busybox_gives_the_same_image_digest(tmp_path: Path) -> None:
    digests = []
    for name in ("a.tar", "b.tar"):
        done = run_cli("fleet", "image", "--output", str(tmp_path / name))
        assert done.exit_code == 0, done.stderr
        digests.append(done.stdout.split("(")[1].split(", ")[1].rstrip(")\n"))
    assert digests[0] == digests[1] and digests[0].startswith("sha256:")
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with Registry(tmp_path / "registry") as reg:
        yield reg


@pytest.mark.slow
def test_pushed_image_is_served_by_the_registry_under_the_printed_digest(
    registry: Registry, tmp_path: Path
) -> None:
    done = run_cli("fleet", "image", "--push", registry.ref("tools/busybox:1"))
    assert done.exit_code == 0, done.stderr
    pinned = done.stdout.strip().removeprefix("pushed ")
    assert pinned.startswith(f"{registry.host}/tools/busybox@sha256:")
    inspected = _skopeo_inspect(tmp_path, "--tls-verify=false", f"docker://{registry.host}/tools/busybox:1")
    assert inspected["Digest"] == pinned.split("@")[1] and len(inspected["Layers"]) == 1
    # the pinned name is what `fleet k8s --image` takes
    docs = run_cli(
        "fleet",
        "k8s",
        "--bundle-configmap",
        "b",
        "--bundle-sha256",
        "ab" * 32,
        "--keyring-configmap",
        "k",
        "--image",
        pinned,
    )
    assert docs.exit_code == 0 and f"image: {pinned}" in docs.stdout, docs.stderr


def test_tools_image_packs_the_given_root_filesystem(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3").write_bytes(b"#!/bin/sh\n")
    (root / "usr/bin/python3").chmod(0o755)
    (root / "bin").symlink_to("usr/bin")
    archive = tmp_path / "node.tar"
    done = run_cli(
        "fleet",
        "image",
        "--tools",
        "image",
        "--rootfs",
        str(root),
        "--output",
        str(archive),
        "--tag",
        "node:1",
    )
    assert done.exit_code == 0, done.stderr
    rootfs = _unpack(archive, "node:1", tmp_path / "unpacked")
    assert (rootfs / "bin").readlink() == Path("usr/bin") and (
        rootfs / "usr/bin/python3"
    ).stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--output", "OUT", "--busybox", "/bin/ls"],
            "/bin/ls is not a statically linked busybox (install busybox-static)",
        ),
        (["--output", "OUT", "--tools", "image"], "--tools image needs --rootfs DIR"),
        (["--tools", "host"], "give --output FILE, --push oci://HOST/REPO:TAG, or both"),
        (["--push", "registry.internal/tools:1"], "must be an oci://HOST[:PORT]/REPO:TAG reference"),
        (
            ["--output", "OUT", "--tools", "image", "--rootfs", "/nonexistent"],
            "--rootfs /nonexistent is not a directory",
        ),
    ],
)
def test_bad_image_options_are_one_sentence(args: List[str], message: str, tmp_path: Path) -> None:
    out = tmp_path / "out.tar"
    done = run_cli("fleet", "image", *[str(out) if a == "OUT" else a for a in args])
    assert done.exit_code == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()
