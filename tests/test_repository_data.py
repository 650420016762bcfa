"""What the tests and the demo use is in the repository, unchanged, each with its provenance.

NVIDIA's 1.20.0 packages built from source, containerd 2.1.5 and the engine and distribution fixtures
sit under ``tests/data`` with a ``SHA256SUMS`` that lists every file beside its README: a file that is
missing, changed or added without a digest fails here (and the tests that use it fail rather than skip).
Nothing tracked reaches outside the checkout for them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.upstream.prebuilt import sums_problem

PROJECT = Path(__file__).resolve().parent.parent
DATA = PROJECT / "tests" / "data"
#: directory -> the provenance files kept beside its data (not listed in SHA256SUMS)
CHECKED = {
    "nvidia-from-source": {"README.md", "LICENSE", "SHA256SUMS"},
    "tools": {"README.md", "SHA256SUMS"},
    "fixtures": {"README.md", "SHA256SUMS", "PROVENANCE.md"},
}
#: a path out of the checkout to the team's reference folder (built so that this file does not match)
OUTSIDE = re.compile("|".join([r"\.\./" + "shared", '"' + 'shared" */', '/ *"' + 'shared"', r"parents\[3\]"]))
NOT_SOURCE = {".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", "build", "demo-work"}


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_each_data_directory_matches_its_sha256sums_and_lists_every_file(name: str) -> None:
    base = DATA / name
    assert sums_problem(base / "SHA256SUMS", what=name) == ""
    listed = {line.split("  ", 1)[1] for line in (base / "SHA256SUMS").read_text().splitlines()}
    present = {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()}
    provenance = {p for p in present if Path(p).name in CHECKED[name]}
    assert present - provenance == listed, "every data file has a digest, every digest a file"
    assert "README.md" in provenance


def test_a_changed_or_unlisted_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"one")
    (tmp_path / "SHA256SUMS").write_text(
        "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed  a\n"
    )
    assert sums_problem(tmp_path / "SHA256SUMS", what="x") == ""
    (tmp_path / "a").write_bytes(b"two")
    assert (
        sums_problem(tmp_path / "SHA256SUMS", what="x")
        == f"{tmp_path / 'a'} does not match its SHA256SUMS line"
    )
    (tmp_path / "a").unlink()
    assert (
        sums_problem(tmp_path / "SHA256SUMS", what="x")
        == f"{tmp_path / 'a'} is listed in SHA256SUMS but missing"
    )
    assert sums_problem(tmp_path / "none", what="x") == f"x is not at {tmp_path} (no SHA256SUMS)"


def test_no_source_file_reaches_outside_the_checkout_for_test_data() -> None:
    hits = []
    for path in PROJECT.rglob("*"):
        if NOT_SOURCE & set(path.relative_to(PROJECT).parts) or not path.is_file():
            continue
        if path.stat().st_size > 1_000_000 or path.suffix in {".deb", ".rpm", ".zst", ".whl", ".pyc"}:
            continue
        text = path.read_text(errors="replace")
        hits += [f"{path.relative_to(PROJECT)}: {m.group()}" for m in OUTSIDE.finditer(text)]
    assert hits == []
