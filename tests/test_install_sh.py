"""Issue 6 end to end: a node with only python3 and gpg installs from the bundle's ``install.sh``.

A mirror is synced from the local upstream with the real ``mirror sync``, a real signed zstd
bundle is built with ``bundle build``, and the node admin's README step is followed literally: the
node command (take out and check the node files with the node's own tar, gpg, gpgv and sha256sum,
then ``sh install.sh BUNDLE --keyring OPERATOR_KEY``) with ``--root SCRATCH --runtime containerd``
appended, under ``sh -c``, with ``python3`` on PATH being python3.9 (when installed) and an
environment with no trace of the project's venv. The scratch root has a real dpkg database seeded
with the node requirements. (Tampered bundles: tests/test_node_trust.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from installer.nodecheck import HEAD, node_command
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import PY39, TOOLKIT, dpkg_versions, node_python, seed_containerd_node

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # dpkg wants ldconfig etc. on PATH


@pytest.fixture(scope="module")
def bundle(deb_bundle: Path) -> Path:
    """The session's signed zstd deb/amd64 bundle of 1.17.8 (read-only)."""
    return deb_bundle


@pytest.fixture()
def node(bundle: Path, tmp_path: Path) -> Path:
    """The node admin's working directory: the node check, install.sh and the zipapp taken out with the system tar."""
    work = tmp_path / "node"
    work.mkdir()
    subprocess.run(["tar", "--occurrence", "-xf", str(bundle), *HEAD], cwd=work, check=True)
    return work


def _bin_dir(path: Path, links: Dict[str, str]) -> Path:
    """A PATH directory of symlinks (name -> target) and, for ``#!`` values, small scripts."""
    path.mkdir()
    for name, target in links.items():
        if target.startswith("#!"):
            (path / name).write_text(target)
            (path / name).chmod(0o755)
        else:
            (path / name).symlink_to(target)
    return path


def _env(path: str, tmp_path: Path) -> Dict[str, str]:
    """What a root shell on a node has: no PYTHONPATH, no VIRTUAL_ENV, nothing from this venv."""
    return {
        "PATH": path,
        "HOME": str(tmp_path / "home"),
        "LANG": "C.UTF-8",
        "GPU_AIRGAP_NODE_CACHE": str(tmp_path / "cache"),
    }


def _install_sh(node: Path, env: Dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", "install.sh", *args], cwd=node, env=env, capture_output=True, text=True, timeout=120
    )


def test_install_sh_installs_with_only_python3_and_gpg_and_a_second_run_has_nothing_to_do(
    node: Path, bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    seed_containerd_node(root)
    python_bin = _bin_dir(tmp_path / "python-bin", {"python3": str(node_python())})
    env = _env(f"{python_bin}:{NODE_PATH}", tmp_path)
    assert (
        subprocess.run(["python3", "-c", "import typer"], env=env, capture_output=True).returncode != 0
    )  # no venv

    shutil.copy(bundle, node / bundle.name)  # the admin copied both to the node
    shutil.copy(operator_key.public, node / "operator.asc")
    documented = f"{node_command(bundle.name)} --root {root} --runtime containerd"
    first = subprocess.run(
        ["/bin/sh", "-c", documented], cwd=node, env=env, capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("install.sh: OK\ngpu-airgap-node.pyz: OK\ninstalled: bundle "), (
        first.stdout
    )  # sha256sum -c, then the tool
    assert 'gpgv: Good signature from "bundle operator' in first.stderr

    inspected = json.loads(run_cli("bundle", "inspect", str(bundle), "--json").stdout)
    (target,) = inspected["targets"]
    assert dpkg_versions(root) == {p["name"]: p["version"] for p in target["packages"]}
    assert sorted(dpkg_versions(root)) == sorted(TOOLKIT)
    for tool in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-cli"):
        assert os.access(root / "usr/bin" / tool, os.X_OK), tool
    report = run_cli("configure", "report", "--root", str(root), "--runtime", "containerd", "--json")
    assert json.loads(report.stdout)["runtime"] == "nvidia", report.stdout
    state = json.loads((root / "var/lib/gpu-airgap/state.json").read_text())
    assert state["signer"] == operator_key.fingerprint and state["bundle_id"][:16] in first.stdout
    assert state["packages"] == dpkg_versions(root) and state["engines"] == ["containerd"]
    # It ran under the node's python3, from the verified extracted copy (bytecode cached there).
    (copy,) = (tmp_path / "cache").iterdir()
    tag = "cpython-39" if node_python() == PY39 else "cpython-"
    assert list(copy.glob(f"installer/__pycache__/install.{tag}*.pyc"))

    args = (bundle.name, "--keyring", "operator.asc", "--root", str(root), "--runtime", "containerd")
    second = _install_sh(node, env, *args)  # checked already: install.sh again, as an admin would
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith("up-to-date:") and "already installed" in second.stdout


def _refusal(node: Path, tmp_path: Path, links: Dict[str, str]) -> subprocess.CompletedProcess[str]:
    tools = {name: f"/usr/bin/{name}" for name in ("dirname", "cut")}
    bin_dir = _bin_dir(tmp_path / "bin", {**tools, **links})
    return _install_sh(node, _env(str(bin_dir), tmp_path), "bundle.tar.zst", "--keyring", "key.asc")


def _one_sentence(stderr: str) -> List[str]:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("install.sh: "), stderr
    return lines


def test_install_sh_without_gpg_exits_7_and_says_to_install_gnupg(node: Path, tmp_path: Path) -> None:
    done = _refusal(node, tmp_path, {"python3": str(node_python())})
    assert done.returncode == 7
    assert "gpg is required" in _one_sentence(done.stderr)[0] and "gnupg" in done.stderr


def test_install_sh_with_an_old_python3_exits_7_naming_its_version(node: Path, tmp_path: Path) -> None:
    old = '#!/bin/sh\n[ "$1" = -V ] && { echo "Python 3.6.15"; exit 0; }\nexit 1  # the version check fails\n'
    done = _refusal(node, tmp_path, {"python3": old, "gpg": "/usr/bin/gpg"})
    assert done.returncode == 7
    (line,) = _one_sentence(done.stderr)
    assert "3.6.15" in line and ">= 3.9" in line


SYSTEM_PYTHON = Path(os.path.realpath("/usr/bin/python3"))


def _minimal_python(prefix: Path, without: List[str]) -> Path:
    """A real python3 whose standard library lacks ``without``, as with Debian's python3-minimal alone.

    The interpreter is copied (it finds its library beside itself) and the library is linked module by module.
    """
    version = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    stdlib, lib = Path(f"/usr/lib/python{version}"), prefix / "lib" / f"python{version}"
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name not in without:
            (lib / entry.name).symlink_to(entry)
    (prefix / "bin").mkdir()
    shutil.copy2(SYSTEM_PYTHON, prefix / "bin" / "python3")
    return prefix / "bin" / "python3"


@pytest.mark.skipif(not SYSTEM_PYTHON.name.startswith("python3."), reason="needs a system python3.X")
def test_install_sh_on_python3_minimal_names_the_missing_modules_and_the_package(
    node: Path, tmp_path: Path
) -> None:
    python = _minimal_python(tmp_path / "minimal", ["shutil.py", "tarfile.py"])
    done = _refusal(node, tmp_path, {"python3": str(python), "gpg": "/usr/bin/gpg"})
    assert done.returncode == 7
    (line,) = _one_sentence(done.stderr)
    assert "lacks the standard library modules shutil tarfile" in line and "libpython3-stdlib" in line


def test_install_sh_checks_every_standard_module_the_node_tool_imports() -> None:
    import ast
    import re
    import sys

    script = (Path(__file__).parents[1] / "mirror/bundle/data/install.sh").read_text()
    listed = set(re.search(r'^stdlib="([^"]+)"', script, re.M).group(1).split())  # type: ignore[union-attr]
    imported = set()
    for package in ("installer", "configure", "plumbing"):
        for source in (Path(__file__).parents[1] / package).rglob("*.py"):
            tree = ast.parse(source.read_text())
            # an import inside `try: ... except ImportError:` is optional (tomllib on 3.11+, sqlite3
            # for dnf's history): the tool runs without it, so install.sh need not demand it
            optional = {
                id(inner)
                for node in ast.walk(tree)
                if isinstance(node, ast.Try)
                and any(
                    isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                    for h in node.handlers
                )
                for stmt in node.body
                for inner in ast.walk(stmt)
            }
            for node in ast.walk(tree):
                if id(node) in optional:
                    continue
                if isinstance(node, ast.Import):
                    imported |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported.add(node.module.split(".")[0])
    standard = {name for name in imported if name in sys.stdlib_module_names and not name.startswith("_")}
    assert standard - listed == set()


def test_install_sh_without_python3_exits_7(node: Path, tmp_path: Path) -> None:
    done = _refusal(node, tmp_path, {"gpg": "/usr/bin/gpg"})
    assert done.returncode == 7 and "python3 (>= 3.9) is required" in _one_sentence(done.stderr)[0]


def test_install_sh_refuses_a_zstd_bundle_on_a_node_without_zstd(
    node: Path, bundle: Path, tmp_path: Path
) -> None:
    tools = {name: f"/usr/bin/{name}" for name in ("dirname", "cut", "od", "tr", "gpg")}
    bin_dir = _bin_dir(tmp_path / "bin", {**tools, "python3": str(node_python())})
    done = _install_sh(node, _env(str(bin_dir), tmp_path), str(bundle), "--keyring", "key.asc")
    assert done.returncode == 7
    (line,) = _one_sentence(done.stderr)
    assert "no zstd command" in line and "--compression xz" in line


def test_install_sh_refuses_when_the_zipapp_was_not_extracted(node: Path, tmp_path: Path) -> None:
    (node / "gpu-airgap-node.pyz").unlink()
    bin_dir = _bin_dir(tmp_path / "bin", {"python3": str(node_python())})
    done = _install_sh(
        node, _env(f"{bin_dir}:{NODE_PATH}", tmp_path), "bundle.tar.zst", "--keyring", "key.asc"
    )
    (line,) = _one_sentence(done.stderr)
    assert done.returncode == 7 and "gpu-airgap-node.pyz is missing" in line
    assert (
        "take them out into a private directory and check them there first, with the command "
        '`gpu-airgap bundle build` printed (README "Install from the bundle")' in line
    )


def test_install_sh_checks_the_node_tool_against_the_given_key_before_running_it(
    node: Path, bundle: Path, other_key: TestKey, tmp_path: Path
) -> None:
    python_bin = _bin_dir(tmp_path / "python-bin", {"python3": str(node_python())})
    env = _env(f"{python_bin}:{NODE_PATH}", tmp_path)
    wrong = _install_sh(node, env, str(bundle), "--keyring", str(other_key.public))
    assert wrong.returncode == 3
    assert "NODE-SHA256SUMS next to this script is not signed by the key in" in _one_sentence(wrong.stderr)[0]
    missing = _install_sh(node, env, str(bundle))
    assert (
        missing.returncode == 2
        and "give the operator's public key file with --keyring" in _one_sentence(missing.stderr)[0]
    )
    assert not (tmp_path / "cache").exists()  # the zipapp never started (it would have made its cache)


def test_install_sh_checks_with_gpg_where_the_node_has_no_gpgv(
    node: Path, bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    tools = {
        name: f"/usr/bin/{name}"
        for name in ("dirname", "cut", "od", "tr", "gpg", "grep", "zstd", "mktemp", "rm", "cp", "sha256sum")
    }
    env = _env(str(_bin_dir(tmp_path / "bin", {**tools, "python3": str(node_python())})), tmp_path)
    wrong = _install_sh(
        node, env, str(bundle), "--keyring", str(other_key.public), "--root", str(tmp_path / "none")
    )
    assert wrong.returncode == 3 and "is not signed by the key in" in _one_sentence(wrong.stderr)[0]
    # With the operator key the check passes and the tool runs: it refuses the missing root itself.
    right = _install_sh(
        node, env, str(bundle), "--keyring", str(operator_key.public), "--root", str(tmp_path / "none")
    )
    assert (
        right.returncode == 2 and "is not a directory" in right.stderr and "install.sh:" not in right.stderr
    ), right.stderr


def test_install_sh_runs_the_node_tool_without_the_nodes_site_packages_start_up_code(
    node: Path, bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    # A .pth file in the node's site-packages is code that `python3 -I` would still run, as root, before
    # the verified zipapp: install.sh passes -S so none of it runs.
    venv = tmp_path / "venv"
    subprocess.run([str(node_python()), "-m", "venv", "--without-pip", str(venv)], check=True)
    marker = tmp_path / "pth-ran"
    (site,) = venv.glob("lib/python3*/site-packages")
    (site / "zz-node.pth").write_text(f"import os; open({str(marker)!r}, 'w').close()\n")
    subprocess.run([str(venv / "bin/python3"), "-I", "-c", "pass"], check=True)
    assert marker.exists()  # the .pth is live for a plain isolated start
    marker.unlink()

    env = _env(f"{venv / 'bin'}:{NODE_PATH}", tmp_path)
    done = _install_sh(
        node, env, str(bundle), "--keyring", str(operator_key.public), "--root", str(tmp_path / "none")
    )
    assert done.returncode == 2 and "is not a directory" in done.stderr, done.stderr  # the tool itself ran
    assert not marker.exists()
