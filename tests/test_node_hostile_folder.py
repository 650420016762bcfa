"""Issue 24 item 4: a folder others can write (a USB disk, a shared upload folder) never runs swapped code.

The node admin runs the documented command, or ``install.sh`` itself, in a directory that an attacker
can write (mode 0777, like a vfat USB disk mounted for a user). The attacker swaps ``install.sh`` and
the zipapp the moment the checker has read them. Checked-then-run-by-path code would run the swap as
root; the node command and ``install.sh`` copy into a private directory first and check and run only
the copies. Two attackers: a deterministic one (a ``sha256sum`` on PATH that swaps right after the real
check, the worst moment) with a control that shows the old command falls to it, and a real concurrent
one that swaps on every inotify close event.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator

import pytest

from installer.nodecheck import HEAD, INSTALL_SH, NODE_TOOL, node_command
from tests import bundle_tamper as tamper
from tests.gpgkeys import TestKey
from tests.node_fixtures import node_tools_dir, seed_containerd_node

BUNDLE = "nvct-1.17.8.tar.zst"
#: the command README showed before this fix: check in the admin's folder, then run from it by path
CHECK_THEN_RUN_BY_PATH = (
    f"tar --occurrence -xf {BUNDLE} {' '.join(HEAD)} && gpg --batch --yes --dearmor -o operator.gpg operator.asc"
    " && gpgv --keyring ./operator.gpg NODE-SHA256SUMS.asc NODE-SHA256SUMS && sha256sum -c NODE-SHA256SUMS"
    f" && sh install.sh {BUNDLE} --keyring operator.asc"
)
#: a tiny inotify loop: on every close of a file read in FOLDER, rename the evil copy over it
ATTACKER = r"""
import ctypes, os, shutil, struct, sys
folder, evil_dir = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
libc.inotify_add_watch(fd, folder.encode(), 0x10)  # IN_CLOSE_NOWRITE
print("ready", flush=True)
while True:
    data = os.read(fd, 65536)
    while data:
        _, _, _, size = struct.unpack_from("iIII", data)
        name = data[16 : 16 + size].rstrip(b"\0").decode()
        data = data[16 + size :]
        if os.path.exists(os.path.join(evil_dir, name)):
            shutil.copy(os.path.join(evil_dir, name), os.path.join(folder, name + ".new"))
            os.rename(os.path.join(folder, name + ".new"), os.path.join(folder, name))
            print("swapped " + name, flush=True)
"""


class Folder:
    """The world-writable folder holding the bundle and the operator key, and the node the admin installs on."""

    def __init__(self, tmp_path: Path, bundle: Path, key: Path) -> None:
        self.dir = tmp_path / "usb"
        self.dir.mkdir()
        self.dir.chmod(0o777)
        (self.dir / BUNDLE).write_bytes(bundle.read_bytes())
        (self.dir / "operator.asc").write_bytes(key.read_bytes())
        self.marker = tmp_path / "MARKER"
        self.evil = tmp_path / "evil"
        self.evil.mkdir()
        (self.evil / INSTALL_SH).write_bytes(tamper.marker_script(self.marker))
        (self.evil / NODE_TOOL).write_bytes(tamper.marker_zipapp(self.marker))
        self.bin = node_tools_dir(tmp_path / "node-bin")
        self.env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",  # the dry run reads the node (dpkg-query)
            "HOME": str(tmp_path / "home"),
            "LANG": "C.UTF-8",
            "GPU_AIRGAP_NODE_CACHE": str(tmp_path / "zipapp-cache"),
        }
        self.root = tmp_path / "root"
        seed_containerd_node(self.root)

    def swap_after_every_check(self, *names: str) -> None:
        """The attacker at the worst moment: a ``sha256sum`` that swaps ``names`` in the folder once it checked."""
        hook = self.bin / "sha256sum"
        hook.unlink()
        swaps = "".join(
            f"cp '{self.evil / n}' '{self.dir / n}.new' && mv '{self.dir / n}.new' '{self.dir / n}'\n"
            for n in names
        )
        hook.write_text(f'#!/bin/sh\n/usr/bin/sha256sum "$@"\nstatus=$?\n{swaps}exit $status\n')
        hook.chmod(0o755)

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sh", "-c", command],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def install_args(self) -> str:
        return f"--root {self.root} --runtime containerd --dry-run"


@pytest.fixture()
def folder(deb_bundle: Path, operator_key: TestKey, tmp_path: Path) -> Folder:
    return Folder(tmp_path, deb_bundle, operator_key.public)


def _ran_the_genuine_tool(folder: Folder, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dry run: nothing was changed" in done.stdout, done.stdout
    assert not folder.marker.exists(), "the swapped file ran"


def test_the_node_command_runs_only_its_private_checked_copies_when_the_folder_is_swapped_after_the_check(
    folder: Folder,
) -> None:
    folder.swap_after_every_check(INSTALL_SH, NODE_TOOL)
    # Control: the old command checked the folder's files and then ran them by path: it runs the swap.
    old = folder.run(CHECK_THEN_RUN_BY_PATH)
    assert folder.marker.read_text().startswith("install.sh from a tampered bundle ran"), old.stderr
    folder.marker.unlink()

    done = folder.run(f"{node_command(BUNDLE)} {folder.install_args()}")
    _ran_the_genuine_tool(folder, done)
    assert "install.sh: OK\ngpu-airgap-node.pyz: OK\n" in done.stdout  # sha256sum -c in the private copy
    assert (folder.dir / INSTALL_SH).read_bytes() == (
        folder.evil / INSTALL_SH
    ).read_bytes()  # the swap did happen


def test_install_sh_run_from_the_folder_runs_its_private_copy_of_the_tool_not_the_swapped_one(
    folder: Folder,
) -> None:
    subprocess.run(["tar", "--occurrence", "-xf", BUNDLE, *HEAD], cwd=folder.dir, check=True)
    folder.swap_after_every_check(NODE_TOOL)
    done = folder.run(f"sh install.sh {BUNDLE} --keyring operator.asc {folder.install_args()}")
    _ran_the_genuine_tool(folder, done)
    assert (folder.dir / NODE_TOOL).read_bytes() == (
        folder.evil / NODE_TOOL
    ).read_bytes()  # the swap did happen


@pytest.fixture()
def attacker(folder: Folder) -> Iterator[subprocess.Popen[str]]:
    """A concurrent attacker process watching the folder with inotify (stopped by its PID)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ATTACKER, str(folder.dir), str(folder.evil)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc
    proc.terminate()
    proc.wait(timeout=30)


def test_install_sh_holds_against_a_real_attacker_swapping_on_every_close_in_the_folder(
    folder: Folder, attacker: subprocess.Popen[str]
) -> None:
    subprocess.run(["tar", "--occurrence", "-xf", BUNDLE, *HEAD], cwd=folder.dir, check=True)
    done = folder.run(f"sh install.sh {BUNDLE} --keyring operator.asc {folder.install_args()}")
    attacker.terminate()
    assert attacker.stdout is not None
    swapped: Dict[str, int] = {}
    for line in attacker.stdout.read().splitlines():
        swapped[line.split()[-1]] = swapped.get(line.split()[-1], 0) + 1
    assert swapped.get(NODE_TOOL), swapped  # the attacker saw the copy read the tool and swapped it
    _ran_the_genuine_tool(folder, done)
