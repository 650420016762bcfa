"""``pip install .`` (README "Quick start") installs every module and data file of the source tree.

The node zipapp that ``bundle build`` writes is assembled from the installed packages, so a
subpackage the wheel leaves out breaks the nodes too (``installer.oci`` once did: every install
from a bundle built by a non-editable install failed with ``No module named 'installer.oci'``).
The wheel is built from a copy of the tree, so the checkout gets no ``build/`` directory.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("plumbing", "configure", "installer", "mirror")


def _source_files() -> set[str]:
    found = set()
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                found.add(path.relative_to(ROOT).as_posix())
    return found


def source_copy(src: Path) -> Path:
    """What ``pip install .`` reads from the checkout, copied to ``src`` (so the checkout gets no build/)."""
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    for top in PACKAGES:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    return src


@pytest.mark.slow
def test_the_wheel_holds_every_module_and_data_file_of_the_source_tree(tmp_path: Path) -> None:
    src = source_copy(tmp_path / "src")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next((tmp_path / "dist").glob("gpu_airgap-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        packed = {name for name in archive.namelist() if name.split("/", 1)[0] in PACKAGES}
    missing = sorted(_source_files() - packed)
    assert not missing, f"pip install . would leave out: {missing}"
