"""The dependency rule, checked on the source: who may import whom (docs/architecture.md).

    plumbing  <-  configure  <-  installer  <-  mirror

and inside mirror/: the shared rooms (index, disk, release, signing) and root modules  <-  the wings
(sync, bundle, publish, fleet)  <-  the command line on top. On the node side the command line has one
room too (installer/cli/), and no node-side module imports itself around a circle.

A small AST scan of every module's imports (function-level ones included, so lazy imports count too).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("plumbing", "configure", "installer", "mirror")
WINGS = ("sync", "bundle", "publish", "fleet")
#: the mirror's shared rooms: what two or more wings need, below every wing
ROOMS = ("index", "disk", "release", "signing")
#: where the node side's command line lives; no other installer module imports typer or click
NODE_CLI_ROOM = "installer/cli/"
#: the mirror modules above the wings: the root command line, the group that joins sync and publish, and
#: the snapshot commands (a delete asks the publish wing which trees serve the snapshot)
MIRROR_TOP = ("mirror/cli.py", "mirror/groups.py", "mirror/__main__.py", "mirror/snapshot_cli.py")
#: what only the connected host has; the node side (the zipapp) must run without them
CONNECTED_ONLY = ("requests", "urllib3", "debian", "rpmfile", "createrepo_c", "rich")
#: modules the node side may use when present but never needs (imported inside a function, guarded)
OPTIONAL_ON_NODE = ("zstandard",)


@dataclass(frozen=True)
class Import:
    """One import statement: the module it names, where, and whether it runs at module load."""

    module: str
    file: str
    line: int
    top_level: bool

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.module}"


def imports_of(package: str) -> Iterator[Import]:
    """Every absolute import in the Python files under ``package`` (a path relative to the checkout)."""
    base = ROOT / package
    files = [base] if base.is_file() else sorted(base.rglob("*.py"))
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        top = {id(node) for node in tree.body} | {
            id(child) for node in tree.body if isinstance(node, (ast.If, ast.Try)) for child in ast.walk(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(alias.name, rel, node.lineno, id(node) in top)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{rel}:{node.lineno}: relative import; gpu-airgap imports absolutely"
                assert node.module is not None
                for alias in node.names:  # `from mirror.disk import store` names mirror.disk.store
                    yield Import(f"{node.module}.{alias.name}", rel, node.lineno, id(node) in top)


def _top(module: str) -> str:
    return module.split(".")[0]


def _wing(name: str) -> str:
    """The wing a module path (``mirror/sync/core.py``) or dotted name (``mirror.sync.core``) is in, or ''."""
    parts = name.replace("/", ".").split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "mirror" and parts[1] in WINGS else ""


def _violations(package: str, bad: Callable[[Import], bool]) -> List[str]:
    return [str(found) for found in imports_of(package) if bad(found)]


@pytest.mark.parametrize(
    ("package", "may_import"),
    [
        ("plumbing", ("plumbing",)),
        ("configure", ("plumbing", "configure")),
        ("installer", ("plumbing", "configure", "installer")),
        ("mirror", OURS),
    ],
)
def test_each_package_imports_only_the_packages_below_it(package: str, may_import: tuple[str, ...]) -> None:
    found = _violations(
        package, lambda i: _top(i.module) in (*OURS, "tests") and _top(i.module) not in may_import
    )
    assert found == [], f"{package} may import only {', '.join(may_import)}"


@pytest.mark.parametrize("wing", WINGS)
def test_a_mirror_wing_imports_no_other_wing_and_nothing_above_it(wing: str) -> None:
    def bad(i: Import) -> bool:
        other = _wing(i.module)
        above = i.module.startswith(("mirror.cli", "mirror.groups"))
        return above or (bool(other) and other != wing)

    found = _violations(f"mirror/{wing}", bad)
    assert found == [], "a piece two wings share belongs in the mirror root, not in a wing"


def test_the_mirror_root_imports_no_wing_except_the_command_line_on_top() -> None:
    found = [
        str(i)
        for i in imports_of("mirror")
        if not _wing(i.file)
        and i.file not in MIRROR_TOP
        and (_wing(i.module) or i.module.startswith("mirror.groups"))
    ]
    assert found == [], "shared mirror modules sit below the wings"


def test_every_mirror_subpackage_is_a_wing_or_a_shared_room() -> None:
    found = sorted(p.parent.name for p in (ROOT / "mirror").glob("*/__init__.py"))
    assert found == sorted((*WINGS, *ROOMS)), (
        "name a new mirror subpackage in WINGS or ROOMS (and docs/architecture.md)"
    )


@pytest.mark.parametrize("room", ROOMS)
def test_a_shared_room_imports_no_wing_and_nothing_above_it(room: str) -> None:
    top = tuple(path[: -len(".py")].replace("/", ".") for path in MIRROR_TOP)
    found = _violations(f"mirror/{room}", lambda i: bool(_wing(i.module)) or i.module.startswith(top))
    assert found == [], "a shared room sits below the wings"


def test_only_the_node_command_line_room_imports_typer_or_click() -> None:
    found = [
        str(i)
        for i in imports_of("installer")
        if _top(i.module) in ("typer", "click") and not i.file.startswith(NODE_CLI_ROOM)
    ]
    assert found == [], f"the node side's command line lives in {NODE_CLI_ROOM}"


@pytest.mark.parametrize("package", ["plumbing", "configure", "installer"])
def test_the_node_side_never_needs_a_connected_host_library(package: str) -> None:
    def bad(i: Import) -> bool:
        top = _top(i.module)
        return top in CONNECTED_ONLY or (top in OPTIONAL_ON_NODE and i.top_level)

    assert _violations(package, bad) == []


@pytest.mark.parametrize(
    "script",
    [
        "mirror/fleet/data/k8s-node.py",
        "deploy/ansible/collections/ansible_collections/airgap/gpu_airgap/plugins/modules/gpu_airgap_node.py",
    ],
)
def test_programs_that_run_alone_on_a_node_import_none_of_our_packages(script: str) -> None:
    assert _violations(script, lambda i: _top(i.module) in (*OURS, "tests")) == []


def test_the_scan_sees_the_imports_it_judges() -> None:
    # A rule over an empty scan would pass for nothing: the lazy import in installer/cli/root.py and the
    # optional zstandard import in installer/archive.py must both be found, the latter not at module level.
    lazy = [
        i
        for i in imports_of("installer/cli/root.py")
        if i.module == "installer.cli.bundle.add_bundle_commands"
    ]
    optional = [i for i in imports_of("installer/archive.py") if i.module == "zstandard"]
    assert lazy and not lazy[0].top_level
    assert optional and not optional[0].top_level
    assert any(i.module.startswith("plumbing.") for i in imports_of("mirror/sync"))


def _module_name(path: str) -> str:
    """``installer/cli/root.py`` -> ``installer.cli.root``; a package's ``__init__.py`` is the package."""
    parts = path[: -len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (lazily or not); ``from a.b import c`` names ``a.b``
    unless ``a.b.c`` is itself a module."""
    scans = {package: list(imports_of(package)) for package in packages}
    modules = {_module_name(i.file) for found in scans.values() for i in found}
    modules |= {
        _module_name(p.relative_to(ROOT).as_posix()) for pkg in packages for p in (ROOT / pkg).rglob("*.py")
    }
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for found in scans.values():
        for i in found:
            target = i.module
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != _module_name(i.file):
                graph[_module_name(i.file)].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> List[List[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: List[str] = []
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_node_side_module_imports_itself_around_a_circle() -> None:
    # A circle (manifest -> manifest_parser -> manifest, once) is hidden by a lazy import; lazy ones count here.
    assert _cycles(_import_graph(("plumbing", "configure", "installer"))) == []


def test_the_circle_check_sees_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
