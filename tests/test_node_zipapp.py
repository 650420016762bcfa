"""The node zipapp's start-up path: lazily loaded command groups and the verified extraction cache.

The end-to-end run of ``install.sh`` with the real zipapp is in ``tests/test_install_sh.py``; these
tests pin down the pieces that make it start fast (issue 6: ``--help`` under 0.5 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer

from installer import zipapp_main
from installer.cli import root as cli
from mirror.bundle.zipapp import build_zipapp
from tests.cli_runner import run_cli

PY39 = Path("/root/.pyenv/versions/3.9.18/bin/python3.9")
HEAVY = (
    "configure.cli",
    "configure.commands",
    "tomlkit",
    "yaml",
    "gnupg",
    "plumbing.gpg",
    "installer.bundle",
    "rich",
)


def test_root_help_imports_neither_configure_nor_its_parsers_nor_gnupg() -> None:
    code = "import json, sys; from installer.cli.root import main; main(['--help']); print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TYPER_USE_RICH": "0"},
        cwd=Path(__file__).parent.parent,
    )
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "configure" in done.stdout and not loaded.intersection(HEAVY)


@pytest.mark.parametrize("name", sorted(cli.LAZY_GROUPS))
def test_lazy_group_help_matches_the_group_it_stands_for(name: str) -> None:
    module, attribute, help_text = cli.LAZY_GROUPS[name]
    group: typer.Typer = getattr(__import__(module, fromlist=[attribute]), attribute)
    assert typer.main.get_group(group).help == help_text


def test_lazy_configure_group_runs_its_real_commands(tmp_path: Path) -> None:
    result = run_cli("configure", "containerd", "--root", str(tmp_path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "nvidia" in result.stdout and not (tmp_path / "etc").exists()
    helped = run_cli("configure", "--help")
    assert (
        helped.exit_code == 0
        and "containerd" in helped.stdout
        and "--install-completion" not in helped.stdout
    )


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pyz") / "gpu-airgap-node.pyz"
    path.write_bytes(build_zipapp(epoch=0))
    return path


def test_zipapp_main_is_the_extracting_launcher_and_rich_is_not_shipped(pyz: Path) -> None:
    with zipfile.ZipFile(pyz) as zf:
        names = zf.namelist()
        assert zf.read("__main__.py") == Path(zipapp_main.__file__).read_bytes()
    assert not [n for n in names if n.split("/")[0] in ("rich", "pygments", "markdown_it", "mdurl")]


def test_extracted_copy_is_private_complete_and_reused(pyz: Path, tmp_path: Path) -> None:
    base = tmp_path / "cache"
    first = zipapp_main.extracted_copy(pyz, base)
    assert first is not None and first.parent == base
    assert (base.stat().st_mode & 0o777, first.stat().st_mode & 0o777) == (0o700, 0o700)
    assert (first / "installer/cli/root.py").read_bytes() == (Path(cli.__file__)).read_bytes()
    assert (first / zipapp_main.MARKER).read_text() == hashlib.sha256(pyz.read_bytes()).hexdigest() + "\n"
    (first / "installer/__pycache__").mkdir()  # what Python writes on the first run survives reuse
    assert zipapp_main.extracted_copy(pyz, base) == first and (first / "installer/__pycache__").is_dir()
    assert [p.name for p in base.iterdir()] == [first.name]  # no temporary directory left


def test_damaged_copy_is_made_again_and_a_foreign_cache_is_not_used(pyz: Path, tmp_path: Path) -> None:
    base = tmp_path / "cache"
    first = zipapp_main.extracted_copy(pyz, base)
    assert first is not None
    (first / zipapp_main.MARKER).write_text("0" * 64 + "\n")  # e.g. a copy of another archive under this name
    (first / "installer/cli/root.py").write_text("raise SystemExit('tampered')\n")
    again = zipapp_main.extracted_copy(pyz, base)
    assert (
        again == first and (first / "installer/cli/root.py").read_bytes() == Path(cli.__file__).read_bytes()
    )
    open_to_all = tmp_path / "world-writable"
    open_to_all.mkdir(mode=0o777)
    open_to_all.chmod(0o777)  # others could swap files in: run from the zip instead
    assert zipapp_main.extracted_copy(pyz, open_to_all) is None and list(open_to_all.iterdir()) == []


def _swapped(pyz: Path, tmp_path: Path) -> bytes:
    """The zipapp with its CLI replaced: what an attacker who can write the .pyz's folder puts there."""
    evil = tmp_path / "evil.pyz"
    with zipfile.ZipFile(pyz) as src, zipfile.ZipFile(evil, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(
                info, b"raise SystemExit('swapped')\n" if info.filename == "installer/cli/root.py" else data
            )
    return evil.read_bytes()


def test_a_zipapp_swapped_after_it_was_hashed_never_lands_in_the_cache(
    pyz: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The attacker swaps the file the moment the launcher has hashed it (deterministically: from inside
    # the digest). Extracting by path again would write the swapped code under the genuine digest's
    # name, and every later run of the genuine zipapp would import it.
    genuine = pyz.read_bytes()
    exposed = tmp_path / "usb" / "gpu-airgap-node.pyz"
    exposed.parent.mkdir()
    exposed.write_bytes(genuine)
    swapped = _swapped(pyz, tmp_path)

    class SwapAfterHashing:
        def __init__(self, data: bytes = b"") -> None:
            self.inner = hashlib.sha256(data)

        def update(self, data: bytes) -> None:
            self.inner.update(data)

        def hexdigest(self) -> str:
            exposed.write_bytes(swapped)
            return self.inner.hexdigest()

    monkeypatch.setattr(zipapp_main, "hashlib", SimpleNamespace(sha256=SwapAfterHashing))
    base = tmp_path / "cache"
    copy = zipapp_main.extracted_copy(exposed, base)
    assert copy is not None and exposed.read_bytes() == swapped  # the swap did happen
    assert (copy / "installer/cli/root.py").read_bytes() == Path(cli.__file__).read_bytes()
    monkeypatch.undo()
    exposed.write_bytes(genuine)  # a later run of the genuine zipapp reuses a genuine copy
    assert zipapp_main.extracted_copy(exposed, base) == copy
    assert (copy / "installer/cli/root.py").read_bytes() == Path(cli.__file__).read_bytes()


def test_a_cache_directory_that_is_a_link_or_not_ours_is_refused_with_a_warning(
    pyz: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(private)
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 65534, 65534)  # nobody's: whoever owns it can change what we would import
    grouped = tmp_path / "grouped"
    grouped.mkdir()
    grouped.chmod(0o770)
    for base in (link, foreign, grouped):
        assert zipapp_main.extracted_copy(pyz, base) is None
        assert f"warning: not using the node tool's cache {base}: it must be a directory (not a link)" in (
            capsys.readouterr().err
        )
    assert list(private.iterdir()) == [] and list(foreign.iterdir()) == [] and list(grouped.iterdir()) == []


@pytest.mark.parametrize("python", [Path(sys.executable), PY39], ids=["host-python", "python3.9"])
def test_zipapp_help_runs_isolated_from_the_cache_and_from_the_zip(
    pyz: Path, python: Path, tmp_path: Path
) -> None:
    if not python.exists():
        pytest.skip(f"{python} is not installed")
    env = {"PATH": "/usr/bin:/bin", "GPU_AIRGAP_NODE_CACHE": str(tmp_path / "cache")}
    for _ in range(2):  # cold (extracts, compiles), then warm (reuses the bytecode)
        done = subprocess.run(
            [str(python), "-I", str(pyz), "--help"], capture_output=True, text=True, env=env, cwd="/"
        )
        assert done.returncode == 0, done.stderr
        assert "install" in done.stdout and "configure" in done.stdout
    (copy,) = (tmp_path / "cache").iterdir()
    assert list(copy.glob("installer/cli/__pycache__/root.*.pyc"))
    open_to_all = tmp_path / "world-writable"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    done = subprocess.run(
        [str(python), "-I", str(pyz), "bundle", "--help"],
        capture_output=True,
        text=True,
        env={**env, "GPU_AIRGAP_NODE_CACHE": str(open_to_all)},
        cwd="/",
    )
    assert done.returncode == 0 and "verify" in done.stdout, done.stderr
