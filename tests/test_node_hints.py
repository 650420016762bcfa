"""Advice the node side prints can be followed (issue 25 item 3).

Every hint in the node side's sources ("pass --x", "use --x", "choose one with --x", or a command in
backticks such as `gpu-airgap configure cdi --force`) names an option the command that prints it
has. And the containerd hint itself: install takes ``--systemd-cgroup``, prints the hint in a dry
run too, and a ``configure containerd`` after the install is a recorded change, not drift.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Set, Tuple

import pytest

from installer.state import load_state
from installer.target import StagedTarget
from plumbing.errors import ExitCode
from tests.cli_runner import command_at, run_cli
from tests.node_fixtures import build_target, seed_dpkg_root
from tests.test_node_install import _keys, _setup  # noqa: F401 (the autouse key fixture)

REPO = Path(__file__).resolve().parent.parent
NODE_SIDE = ("installer", "configure", "plumbing")
#: a hint: advice naming an option to add
ADVICE = re.compile(r"\b(?:pass|use|choose one with|choose another|pass its \w+ with)\s+(--[^;)]*)")
#: a command named in backticks, with the options it is told to take
NAMED = re.compile(r"`(?:gpu-airgap )?((?:configure|bundle) [a-z]+|install|uninstall|status|restart)([^`]*)`")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")

#: the commands whose output carries a module's messages (the first matching prefix wins)
PRINTED_BY: Sequence[Tuple[str, Sequence[str]]] = (
    ("installer/freshness.py", ("install", "bundle verify", "bundle push", "bundle pull")),
    ("installer/oci/", ("install", "bundle pull", "bundle push")),
    ("installer/manage.py", ("uninstall",)),
    ("installer/purge.py", ("uninstall",)),
    ("installer/", ("install",)),
    ("configure/containerd/", ("install", "configure containerd")),
    ("configure/distros/", ("install", "configure containerd")),
    ("configure/docker.py", ("install", "configure docker")),
    ("configure/crio.py", ("install", "configure crio")),
    ("configure/podman/", ("install", "configure podman")),
    ("configure/lxc/", ("install", "configure lxc")),
    ("configure/cdi/", ("install", "configure cdi")),
    ("configure/revert.py", ("uninstall", "configure revert")),
    ("configure/live/", ("configure verify",)),
    ("plumbing/gpg.py", ("install", "bundle verify", "bundle push", "bundle pull")),
    # ManagedByOperator: raised by the containerd distros (configure/distros/operator.py)
    ("plumbing/errors.py", ("install", "configure containerd")),
)
#: (module, option) whose hint only one of the module's commands can print, and why
ONLY: Dict[Tuple[str, str], Tuple[str, ...]] = {
    # the build order of installed bundles matters to install only
    ("installer/freshness.py", "--allow-downgrade"): ("install",),
    # follows a --drop-in the user gave, which install does not take
    ("configure/containerd/engine.py", "--no-drop-in"): ("configure containerd",),
    # where a pulled split bundle is written: bundle pull's own option
    ("installer/oci/transfer.py", "--output"): ("bundle pull",),
    # an existing spec configure cdi is told to replace; install keeps a valid one and says so
    ("configure/cdi/spec.py", "--force"): ("configure cdi",),
}


def _texts(tree: ast.AST) -> Iterator[str]:
    """Every string literal but docstrings; an f-string's parts joined around ``X``."""
    skip: Set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            yield "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.value


def _options(command: str) -> Set[str]:
    return {name for p in command_at(command.split()).params for name in getattr(p, "opts", [])}


def collect_hints() -> List[Tuple[str, str, str]]:
    """(module, command, option) for every option a hint tells the user to add."""
    found = []
    for base in NODE_SIDE:
        for path in sorted((REPO / base).rglob("*.py")):
            module = str(path.relative_to(REPO))
            if module.endswith("cli.py"):
                continue  # help texts, not advice
            commands = next((cmds for prefix, cmds in PRINTED_BY if module.startswith(prefix)), ())
            for text in _texts(ast.parse(path.read_text())):
                for named, rest in NAMED.findall(text):
                    found += [(module, named, option) for option in OPTION.findall(rest)]
                for clause in ADVICE.findall(NAMED.sub("", text)):
                    for option in OPTION.findall(clause):
                        printers = ONLY.get((module, option), commands) or ("",)  # "": nobody known
                        found += [(module, command, option) for command in printers]
    return found


def test_every_hint_names_an_option_of_the_command_that_prints_it() -> None:
    hints = collect_hints()
    assert ("configure/containerd/engine.py", "install", "--systemd-cgroup") in hints  # the scan sees them
    assert ("installer/purge.py", "uninstall", "--purge") in hints
    missing = [hint for hint in hints if hint[1] and hint[2] not in _options(hint[1])]
    assert missing == []


def test_every_module_with_advice_is_attributed_to_its_commands() -> None:
    unattributed = sorted({m for m, c, _ in collect_hints() if not c})
    assert unattributed == []


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> StagedTarget:
    return build_target(tmp_path_factory.mktemp("hint-release") / "deb", "deb", "1.17.8-1", "amd64")


def containerd_without_config(root: Path) -> Path:
    """A Debian-like node with containerd's binary and no config.toml (containerd's defaults)."""
    seed_dpkg_root(root)
    binary = root / "usr/bin/containerd"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return root


HINT = "pass --systemd-cgroup true|false to match the kubelet"
CONFIG = "etc/containerd/config.toml"


def test_install_warns_in_a_dry_run_too_and_takes_the_option_it_names(
    tmp_path: Path, target: StagedTarget
) -> None:
    root = containerd_without_config(tmp_path / "root")
    bundle, key, _, _ = _setup(tmp_path, target)
    base = ("install", str(bundle), "--keyring", str(key), "--root", str(root))
    dry = run_cli(*base, "--dry-run")
    assert (
        dry.exit_code == 0 and "containerd: SystemdCgroup is left unset" in dry.stdout and HINT in dry.stdout
    )
    done = run_cli(*base, "--systemd-cgroup", "true")
    assert done.exit_code == 0, done.stderr
    assert HINT not in done.stdout
    assert "SystemdCgroup = true" in (root / CONFIG).read_text()
    wrong = run_cli(*base, "--systemd-cgroup", "yes")
    assert wrong.exit_code == ExitCode.USAGE and "'yes' is not one of 'auto', 'true', 'false'" in wrong.stderr


def test_configure_after_install_is_a_recorded_change_that_uninstall_reverts_too(
    tmp_path: Path, target: StagedTarget
) -> None:
    root = containerd_without_config(tmp_path / "root")
    bundle, key, _, _ = _setup(tmp_path, target)
    installed = run_cli("install", str(bundle), "--keyring", str(key), "--root", str(root))
    assert installed.exit_code == 0 and HINT in installed.stdout
    followed = run_cli("configure", "containerd", "--systemd-cgroup", "true", "--root", str(root))
    assert followed.exit_code == 0, followed.stderr
    assert "SystemdCgroup = true" in (root / CONFIG).read_text()

    status = run_cli("status", "--root", str(root))
    assert status.exit_code == 0, status.stdout
    assert "no drift from the recorded install" in status.stdout
    state = load_state(root)
    assert state is not None and state.complete  # the record itself is left as the install wrote it

    (root / CONFIG).write_text((root / CONFIG).read_text() + "# an edit by hand\n")
    drift = run_cli("status", "--root", str(root))
    assert (
        drift.exit_code == ExitCode.PROBLEMS_FOUND and "was edited after gpu-airgap wrote it" in drift.stdout
    )
    (root / CONFIG).write_text((root / CONFIG).read_text().replace("# an edit by hand\n", ""))

    removed = run_cli("uninstall", "--root", str(root))
    assert removed.exit_code == 0, removed.stderr
    assert not (root / CONFIG).exists()  # the install created it; both changes are gone with it
