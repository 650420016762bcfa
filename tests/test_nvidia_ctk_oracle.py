"""NVIDIA's own ``nvidia-ctk runtime configure`` is the oracle for every engine config we write.

For every containerd, Docker and CRI-O config in ``tests/data/fixtures`` (the distro nodes' plain
containerd configs too, and the shapes the other tests use), under four flag sets, ``gpu-airgap configure
ENGINE`` and the real ``nvidia-ctk`` 1.20.0 (``--dry-run``, its output written where it would write it)
each change a copy of the node. Both results are then read the way the engine reads them (:mod:`tests.engine_oracle`: ``containerd config dump``
with imports, daemon.json, crio.conf plus its drop-ins) and must agree on the nvidia runtime's table
(``runtime_type``, ``BinaryName``, ``SystemdCgroup``; Docker's ``path``; CRI-O's ``runtime_path``,
``runtime_type``, ``monitor_path``, ``runtime_root``), the default runtime and CDI enablement.

Every place where we differ on purpose is a row of :data:`INTENDED`, and the test asserts the exact set
of differences per case: a difference not in the table fails, and so does a row that stops happening.
Differences in the files themselves (comments, drop-in vs main file) are named in :data:`FILE_LEVEL`
and checked by the last tests. docs/node.md "How we differ from nvidia-ctk" says why.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
import tomllib

from tests.cli_runner import run_cli
from tests.engine_oracle import (
    Effective,
    containerd_effective,
    crio_effective,
    docker_effective,
    oracle_missing,
    run_nvidia_ctk,
)
from tests.node_fixtures import CONTAINERD_CONFIG

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(oracle_missing()), reason=oracle_missing() or "ready"),
]

FIXTURES = Path(__file__).parent / "data" / "fixtures"
MAIN = {
    "containerd": "/etc/containerd/config.toml",
    "docker": "/etc/docker/daemon.json",
    "crio": "/etc/crio/crio.conf",
}
#: nvidia-ctk 1.20's default drop-ins (cmd/nvidia-ctk/runtime/configure/configure.go)
THEIR_DROP_IN = {
    "containerd": "/etc/containerd/conf.d/99-nvidia.toml",
    "crio": "/etc/crio/crio.conf.d/99-nvidia.toml",
}


@dataclass(frozen=True)
class Case:
    """One node state: a config file (or a whole node tree) and the path the tools are pointed at."""

    id: str
    engine: str
    config: str  #: node path of the main config both tools edit
    source: Optional[Path] = None  #: a fixture file, or a node tree when ``tree``
    tree: bool = False
    text: Optional[str] = None  #: inline content (None with no source: the file does not exist)
    place: Optional[str] = None  #: node path the fixture file goes to, when it is not ``config``

    def lay_out(self, root: Path) -> Path:
        if self.tree and self.source is not None:
            shutil.copytree(self.source, root, ignore=shutil.ignore_patterns("_*"))
            return root
        root.mkdir(parents=True)
        target = root / (self.place or self.config).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if self.source is not None:
            shutil.copyfile(self.source, target)
        elif self.text is not None:
            target.write_text(self.text)
        return root


def _fixture_files() -> List[Tuple[str, Path]]:
    """Every fixture file of containerd/, docker/ and crio/ in tests/data/fixtures.

    ``iterdir`` raises when a directory is missing: a broken checkout fails collection, it does not
    quietly shrink the cases.
    """
    return [
        (f"fixtures/{engine}/{path.name}", path)
        for engine in MAIN
        for path in sorted((FIXTURES / engine).iterdir())
        if path.suffix != ".md"
    ]


def _distro_cases() -> List[Case]:
    """The plain containerd configs of the distro nodes (not their Go templates, not imported drop-ins)."""
    base = FIXTURES / "distros"
    cases = []
    for path in sorted(base.rglob("*.toml")):
        parts = path.relative_to(base).parts
        depth = 1
        while parts[depth].startswith("_"):  # alternative states of the same node
            depth += 1
        node_path = "/" + "/".join(parts[depth:])
        if node_path.startswith("/etc/k0s/containerd.d/"):
            continue  # imported by k0s's containerd.toml, laid out with it
        if "/nvidia-container-runtime/" in node_path:
            continue  # the toolkit's own config.toml (GPU Operator nodes), not an engine's
        cases.append(
            Case(
                f"distros/{'/'.join(parts[:depth])}{node_path}",
                "containerd",
                node_path,
                base.joinpath(*parts[:depth]),
                tree=True,
            )
        )
    return cases


def all_cases() -> List[Case]:
    cases = []
    for label, path in _fixture_files():
        engine = path.parent.name
        if (
            engine == "crio" and path.name != "crio.conf"
        ):  # a drop-in: the packaged 10-crio.conf, no crio.conf
            cases.append(Case(label, engine, MAIN[engine], path, place=f"/etc/crio/crio.conf.d/{path.name}"))
        else:
            cases.append(Case(label, engine, MAIN[engine], path))
    cases += _distro_cases()
    containerd = MAIN["containerd"]
    cases += [
        Case("inline/containerd-missing", "containerd", containerd),
        Case("inline/containerd-empty", "containerd", containerd, text=""),
        Case(
            "inline/containerd-version-1",
            "containerd",
            containerd,
            text='[plugins.cri]\n  sandbox_image = "registry.k8s.io/pause:3.6"\n',
        ),
        Case("inline/node-fixtures", "containerd", containerd, text=CONTAINERD_CONFIG.decode()),
        Case("inline/docker-missing", "docker", MAIN["docker"]),
        Case("inline/crio-missing", "crio", MAIN["crio"]),
    ]
    return cases


#: flag set -> (our flags, nvidia-ctk's flags); both CDI aliases of nvidia-ctk are used.
FLAGSETS: Dict[str, Tuple[List[str], List[str]]] = {
    "defaults": ([], []),
    "in-place": (["--no-drop-in"], ["--drop-in-config="]),
    "set-as-default": (["--set-as-default"], ["--set-as-default"]),
    "cdi": (["--cdi", "on"], ["--cdi.enabled"]),
    "in-place+set-as-default+cdi": (
        ["--no-drop-in", "--set-as-default", "--cdi", "on"],
        ["--drop-in-config=", "--set-as-default", "--enable-cdi"],
    ),
}


@dataclass(frozen=True)
class Intended:
    """A difference from nvidia-ctk we keep on purpose (docs/node.md "How we differ from nvidia-ctk")."""

    key: str
    applies: Callable[[Case, str], bool]
    ours: Callable[
        [str], Dict[str, Any]
    ]  #: flag set -> {field of :func:`fields`: our value}, where nvidia-ctk's differs
    why: str


def _is(*ids: str) -> Callable[[Case, str], bool]:
    return lambda case, _flags: case.id.endswith(ids)


def _flagged(flags: str, base: Dict[str, Any]) -> Dict[str, Any]:
    """``base`` plus the default and CDI our flags set (where nvidia-ctk's change did not take)."""
    extra = {"default": "nvidia"} if "set-as-default" in flags else {}
    return {**base, **extra, **({"cdi": True} if "cdi" in flags else {})}


NVIDIA = {
    "runtime.runtime_type": "io.containerd.runc.v2",
    "runtime.BinaryName": "/usr/bin/nvidia-container-runtime",
}
_V1 = "inline/containerd-version-1"
_NO_RUNTIMES_TABLE = (
    "inline/containerd-missing",
    "inline/containerd-empty",
    _V1,
    "inline/node-fixtures",
    # the GPU Operator's nodes with its toolkit switched off: the config its RemoveRuntime left empty
    "gpu-operator-toolkit-disabled/etc/containerd/config.toml",
    "gpu-operator-driver-container/etc/containerd/config.toml",
)

INTENDED: List[Intended] = [
    Intended(
        "docker-absolute-path",
        lambda case, _flags: case.engine == "docker",
        lambda _f: {"runtime.path": "/usr/bin/nvidia-container-runtime"},
        "nvidia-ctk writes the bare name for Docker and relies on dockerd's PATH; we write the absolute path "
        "the package installs, so a PATH without /usr/bin (systemd units can set one) still finds it",
    ),
    Intended(
        "default-kept",
        lambda c, f: c.id.endswith("gpu-operator/etc/containerd/config.toml") and "set-as-default" not in f,
        lambda _f: {"default": "nvidia"},
        "without --set-as-default nvidia-ctk deletes default_runtime_name when it names the runtime it registers, "
        "so a node whose admin (here the GPU Operator) chose nvidia falls back to runc; we never change the default unasked",
    ),
    Intended(
        "default-runtime-defined",
        _is(*_NO_RUNTIMES_TABLE),
        lambda _f: {"runtimes": ("nvidia", "runc")},
        "a config without a runtimes table relies on containerd's built-in runc; once a runtimes table exists "
        "containerd no longer adds it, and containerd 1.6's CRI plugin then fails to load ('no corresponding runtime "
        'configured in containerd.runtimes for default_runtime_name = "runc"\', seen by hand); we define runc next '
        "to nvidia, nvidia-ctk does not",
    ),
    Intended(
        "version-1-edited-in-place",
        lambda c, f: c.id.endswith(_V1) and "in-place" not in f,
        lambda f: _flagged(f, NVIDIA),
        "for a version 1 config nvidia-ctk 1.20 saves the whole rewritten config to conf.d/99-nvidia.toml, which "
        "nothing imports (version 1 has no imports), so containerd never sees the runtime; we edit version 1 in place",
    ),
    Intended(
        "version-1-cdi-key",
        lambda c, f: c.id.endswith(_V1) and "in-place" in f and "cdi" in f,
        lambda _f: {"cdi": True},
        "nvidia-ctk writes a version 1 config's enable_cdi under plugins.cri.containerd, which containerd ignores "
        "('Ignoring unknown key ... containerd enable_cdi'); we write plugins.cri.enable_cdi",
    ),
    Intended(
        "runtime-type-set",
        _is("microk8s/var/snap/microk8s/current/args/containerd-template.toml"),
        lambda _f: {"runtime.runtime_type": "io.containerd.runc.v2"},
        "nvidia-ctk copies the default runtime's whole table, here MicroK8s's unrendered ${RUNTIME_TYPE}; we copy "
        "the options (SystemdCgroup) and set runtime_type ourselves (after MicroK8s renders the template both read io.containerd.runc.v2)",
    ),
    Intended(
        "crio-inherits-from-drop-ins",
        _is("crio/10-crio.conf"),
        lambda _f: {"runtime.monitor_path": "/usr/libexec/crio/conmon", "runtime.runtime_root": "/run/crun"},
        "nvidia-ctk reads only crio.conf, which packaged CRI-O no longer ships, so it inherits nothing ('Could not "
        "infer options from runtimes [runc crun]'); we read crio.conf and crio.conf.d as CRI-O does and inherit "
        "from the default runtime (crun)",
    ),
    Intended(
        "crio-in-place-keeps-the-file",
        lambda c, f: c.id.endswith("crio/crio.conf") and "in-place" in f,
        lambda f: {"runtimes": ("nvidia", "runc"), **({} if "set-as-default" in f else {"default": "runc"})},
        'with --drop-in-config="" nvidia-ctk 1.20 replaces crio.conf with a file holding only the nvidia table, '
        "losing default_runtime and every other runtime (357 lines become 11); we edit crio.conf and keep the rest",
    ),
]


def fields(effective: Effective) -> Dict[str, Any]:
    """What must agree: the runtime's settings, the runtimes defined, the default runtime, CDI, whether the engine could read it."""
    out = {f"runtime.{k}": v for k, v in effective.runtime.items()}
    out.update(
        runtimes=effective.runtimes, default=effective.default, cdi=effective.cdi, error=bool(effective.error)
    )
    return out


def effective(case: Case, root: Path) -> Effective:
    if case.engine == "containerd":
        return containerd_effective(root, case.config)
    if case.engine == "docker":
        return docker_effective(root, case.config)
    return crio_effective(root)


def ours(case: Case, root: Path, flags: List[str]) -> Optional[str]:
    """Run ``gpu-airgap configure``; return its error sentence when it refuses."""
    # A distro node's file is compared as plain containerd would edit it: --distro containerd overrides
    # the detection that would otherwise leave k3s's generated config alone (tests/test_distros.py covers
    # what each distribution gets), and --force takes the GPU Operator's node over.
    distro = ["--distro", "containerd", "--force"] if case.id.startswith("distros/") else []
    done = run_cli("configure", case.engine, "--root", str(root), "--config", case.config, *distro, *flags)
    return None if done.exit_code == 0 else done.stderr.strip()


def theirs(case: Case, root: Path, flags: List[str]) -> Optional[str]:
    """Run nvidia-ctk's dry run on ``root``'s config and write what it printed where it would write it."""
    code, texts, log = run_nvidia_ctk(case.engine, root / case.config.lstrip("/"), flags)
    if code != 0:
        return log.strip()
    in_place = "--drop-in-config=" in flags
    for part, text in texts.items():
        # One document for containerd without --drop-in-config="" is a version 1 config: nvidia-ctk 1.20
        # saves it to the drop-in path (seen with a real run; its dry run does not say where).
        to_drop_in = part == "drop-in" or (part == "config" and case.engine == "containerd" and not in_place)
        node_path = THEIR_DROP_IN[case.engine] if to_drop_in else case.config
        target = root / node_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return None


def expected(case: Case, flagset: str) -> Dict[str, Any]:
    """Field -> our value, for every intended difference that applies."""
    out: Dict[str, Any] = {}
    for row in INTENDED:
        if row.applies(case, flagset):
            out.update(row.ours(flagset))
    return out


CASES = all_cases()


@pytest.mark.parametrize("flagset", list(FLAGSETS))
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_effective_config_agrees_with_nvidia_ctk_except_where_intended(
    case: Case, flagset: str, tmp_path: Path
) -> None:
    our_flags, their_flags = FLAGSETS[flagset]
    if case.engine == "docker" and flagset == "in-place":
        pytest.skip("Docker has no drop-ins: daemon.json is always edited in place")
    our_root, their_root = case.lay_out(tmp_path / "ours"), case.lay_out(tmp_path / "theirs")
    our_error, their_error = ours(case, our_root, our_flags), theirs(case, their_root, their_flags)
    # A config the engine cannot read is refused by both tools, and neither writes anything.
    assert (our_error is None) == (their_error is None), (our_error, their_error)
    if our_error is not None:
        assert " is not valid TOML " in our_error
        return
    with ThreadPoolExecutor(2) as pool:  # each reading is a few containerd runs; run both sides at once
        our_view, their_view = pool.map(lambda root: effective(case, root), (our_root, their_root))
    mine, nvidia = fields(our_view), fields(their_view)
    assert not mine["error"], our_view.error
    differences = {k: (mine.get(k), nvidia.get(k)) for k in {*mine, *nvidia} if mine.get(k) != nvidia.get(k)}
    intended = expected(case, flagset)
    assert set(differences) == set(intended), differences
    assert {name: ours for name, (ours, _) in differences.items()} == intended
    assert (
        mine[
            "runtime.BinaryName"
            if case.engine == "containerd"
            else "runtime.path"
            if case.engine == "docker"
            else "runtime.runtime_path"
        ]
        == "/usr/bin/nvidia-container-runtime"
    )


def test_every_intended_difference_happens_somewhere() -> None:
    for row in INTENDED:
        assert any(row.applies(case, flags) for case in CASES for flags in FLAGSETS), row.key


def _comment_lines(text: str) -> List[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")]


def test_comments_and_order_survive_in_our_files_and_not_in_nvidia_ctks(tmp_path: Path) -> None:
    """FILE_LEVEL "comments-kept": nvidia-ctk re-renders the whole file; we edit it, keeping comments."""
    case = next(c for c in CASES if c.id.endswith("containerd/config.toml.base"))
    original = case.source.read_text() if case.source else ""
    comments = _comment_lines(original)
    assert comments
    our_root, their_root = case.lay_out(tmp_path / "ours"), case.lay_out(tmp_path / "theirs")
    assert (
        ours(case, our_root, ["--no-drop-in"]) is None
        and theirs(case, their_root, ["--drop-in-config="]) is None
    )
    our_text, their_text = (r / case.config.lstrip("/") for r in (our_root, their_root))
    assert _comment_lines(our_text.read_text()) == comments
    assert _comment_lines(their_text.read_text()) == []


def test_where_the_change_lands_for_a_containerd_1x_node(tmp_path: Path) -> None:
    """FILE_LEVEL "main-file-for-1x": for a version 2 config without imports on containerd 1.x, we edit the
    main file; nvidia-ctk 1.20 writes conf.d/99-nvidia.toml carrying a copy of the whole CRI plugin table
    (containerd < 2.1 replaces a plugin's table from an import wholesale) and adds the import."""
    case = next(c for c in CASES if c.id.endswith("containerd/config-1.6-default.toml"))
    our_root, their_root = case.lay_out(tmp_path / "ours"), case.lay_out(tmp_path / "theirs")
    assert ours(case, our_root, []) is None and theirs(case, their_root, []) is None
    assert not (our_root / THEIR_DROP_IN["containerd"].lstrip("/")).exists()
    drop_in = tomllib.loads((their_root / THEIR_DROP_IN["containerd"].lstrip("/")).read_text())
    cri = tomllib.loads(case.source.read_text() if case.source else "")["plugins"][
        "io.containerd.grpc.v1.cri"
    ]
    their_cri = drop_in["plugins"]["io.containerd.grpc.v1.cri"]
    assert set(cri) <= set(their_cri) and set(cri["containerd"]["runtimes"]) < set(
        their_cri["containerd"]["runtimes"]
    )
    assert tomllib.loads((their_root / case.config.lstrip("/")).read_text())["imports"] == [
        "/etc/containerd/conf.d/*.toml"
    ]
