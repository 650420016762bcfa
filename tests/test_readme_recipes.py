"""Issue 25 item 11: README.md is short, its links resolve and every recipe in it runs.

A recipe is the fenced ``sh`` block right after ``<!-- recipe: NAME -->``. Each is run with ``bash``
as written, against the local upstream instead of NVIDIA and a scratch node root instead of ``/``:
the only rewrites are the ones :func:`adapt` lists (the mirror and temp paths into the test's
directory, ``--upstream``/``--keyring`` on the Quick start's first sync, ``--root`` on the node
commands, a passphrase-less operator key). Later syncs get no ``--upstream``: the mirror recorded it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from installer.nodecheck import node_command
from tests.cli_runner import run_cli
from tests.node_fixtures import CONTAINERD_CONFIG, dpkg_versions, seed_containerd_node, seed_rpm_root
from tests.upstream import UpstreamServer, UpstreamTree, stop_agent

PROJECT = Path(__file__).resolve().parents[1]
README = PROJECT / "README.md"
BUNDLE = "nvct-1.17.8.tar.zst"
NEWER = "nvct-1.18.0.tar.zst"
TOOLKIT = "nvidia-container-toolkit"

_RECIPE = re.compile(r"<!-- recipe: ([\w-]+) -->\n```sh\n(.*?)```", re.S)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```")


def recipes() -> dict[str, str]:
    """Every marked block of README.md by name."""
    found: dict[str, str] = {}
    for name, body in _RECIPE.findall(README.read_text()):
        assert name not in found, f"two recipes are named {name}"
        found[name] = body
    return found


# -- the page itself ---------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of every heading of ``page`` outside code (a repeated heading gets ``-1``, ``-2``)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """Every relative link of ``page`` whose file or heading anchor does not exist."""
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check
        path_part, _, anchor = target.partition("#")
        file = (page.parent / path_part).resolve() if path_part else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(file):
            broken.append(f"{target}: {file.name} has no heading #{anchor}")
    return broken


def test_the_readme_is_at_most_30_kb() -> None:
    assert README.stat().st_size <= 30 * 1024


def test_every_link_of_the_readme_and_docs_names_an_existing_file_and_heading() -> None:
    pages = [README, *sorted((PROJECT / "docs").glob("*.md"))]
    assert {p: broken_links(p) for p in pages} == {p: [] for p in pages}
    linked = {t.partition("#")[0] for t in _LINK.findall(README.read_text())}
    assert {f"docs/{p.name}" for p in (PROJECT / "docs").glob("*.md")} <= linked  # every page is in the table


def test_the_readmes_short_list_names_every_exit_code_of_the_reference() -> None:
    table = re.findall(r"^\| (\d+) \| [A-Z_]+ \|", (PROJECT / "docs/reference.md").read_text(), re.M)
    short = re.search(r"Exit codes in short: (.*?)\(\[docs/reference.md\]", README.read_text(), re.S)
    assert short is not None
    assert re.findall(r"(?:^|, )(\d+) ", " ".join(short.group(1).split())) == table


def test_the_link_check_sees_a_missing_heading_and_a_missing_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n```\n# not a heading\n```\n[a](#title) [b](#not-a-heading) [c](gone.md)\n")
    assert broken_links(page) == [
        "#not-a-heading: page.md has no heading #not-a-heading",
        "gone.md: no such file",
    ]


def test_the_node_recipes_are_the_command_bundle_build_prints() -> None:
    def flat(text: str) -> str:
        return " ".join(text.replace("\\\n", " ").split())

    found = recipes()
    assert flat(found["quick-start-node"]) == node_command(BUNDLE)
    assert flat(found["upgrade-node"]) == node_command(NEWER)
    assert flat(found["rollback"]) == node_command(BUNDLE) + " --allow-downgrade"


# -- running the recipes ---------------------------------------------------------------------------


def _logical_lines(block: str) -> list[str]:
    return block.replace("\\\n", " ").splitlines()


def _code_and_comment(line: str) -> tuple[str, str]:
    match = re.search(r"\s+#\s.*$", line)
    return (line[: match.start()], line[match.start() :]) if match else (line, "")


@dataclass
class Site:
    """One test's operator directory, mirror, gpg home and scratch node root, and the upstream it syncs from."""

    dir: Path
    upstream: str
    upstream_key: Path

    @property
    def mirror(self) -> Path:
        return self.dir / "srv/nvct"

    @property
    def node(self) -> Path:
        return self.dir / "node"

    def adapt(self, name: str, block: str, install_options: str = "") -> str:
        """The block as the test runs it (the rewrites this module's docstring lists, nothing else).

        ``install_options`` go at the end of the node command, where the README says they go.
        """
        lines = []
        for line in _logical_lines(block):
            code, comment = _code_and_comment(line)
            code = code.replace("/srv/nvct", str(self.mirror)).replace(
                "/tmp/gpu-airgap.", f"{self.dir}/gpu-airgap."
            )
            code = code.replace("gpg --quick-gen-key", "gpg --batch --passphrase '' --quick-gen-key")
            if name == "quick-start-operator" and "gpu-airgap mirror sync" in code:
                code += f" --upstream {self.upstream} --keyring {self.upstream_key}"
            if 'sh "$d/install.sh"' in code and install_options:
                code += f" {install_options}"
            if 'sh "$d/install.sh"' in code or 'gpu-airgap-node.pyz" ' in code:
                code += f" --root {self.node}"
            lines.append(code + comment)
        return "\n".join(lines) + "\n"

    def run(
        self, *names: str, install_options: str = "", check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """The named recipes, adapted, as one bash script (so ``$d`` carries from one to the next)."""
        found = recipes()
        script = "set -eu\n" + "".join(self.adapt(n, found[n], install_options) for n in names)
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.dir,
            env={
                "PATH": f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME": str(self.dir / "home"),
                "GNUPGHOME": str(self.dir / "gnupg"),
                "LANG": "C.UTF-8",
                "GPU_AIRGAP_NODE_CACHE": os.environ["GPU_AIRGAP_NODE_CACHE"],
            },
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if check:
            assert done.returncode == 0, f"{names}:\n{script}\n{done.stdout}\n{done.stderr}"
        return done


def _new_site(path: Path, upstream_tree: UpstreamTree, server: UpstreamServer) -> Site:
    site = Site(path, server.url, upstream_tree.public_key)
    (path / "home").mkdir(parents=True)
    (path / "gnupg").mkdir(mode=0o700)
    seed_containerd_node(site.node)
    return site


@pytest.fixture(scope="module")
def operated(
    upstream_tree: UpstreamTree,
    _upstream_session_server: UpstreamServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Site]:
    """The Quick start's connected-host part, run once: mirror, operator key, ``nvct-1.17.8.tar.zst``."""
    site = _new_site(tmp_path_factory.mktemp("readme") / "site", upstream_tree, _upstream_session_server)
    site.run("quick-start-operator")
    yield site
    stop_agent(site.dir / "gnupg")


@pytest.fixture()
def site(operated: Site, tmp_path: Path) -> Iterator[Site]:
    """A copy of :func:`operated` of this test's own (its mirror and node change)."""
    copy = Site(tmp_path / "site", operated.upstream, operated.upstream_key)
    shutil.copytree(
        operated.dir, copy.dir, symlinks=True, ignore=shutil.ignore_patterns("S.*", "*.lock", ".#*")
    )
    yield copy
    stop_agent(copy.dir / "gnupg")


def _inspect(site: Site, bundle: str) -> str:
    inspected = run_cli("bundle", "inspect", str(site.dir / bundle))
    assert inspected.exit_code == 0, inspected.stderr
    return inspected.stdout


@pytest.mark.slow
def test_quick_start_builds_a_verified_bundle_and_installs_it_on_the_node(site: Site) -> None:
    assert (site.dir / BUNDLE).is_file()
    assert (site.dir / "operator.asc").read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    done = site.run("quick-start-node", "quick-start-check")
    assert dpkg_versions(site.node)[TOOLKIT] == "1.17.8-1"
    assert "nvidia" in (site.node / "etc/containerd/config.toml").read_text()
    assert "1.17.8" in done.stdout


@pytest.mark.slow
def test_list_shows_the_mirrors_release_among_upstreams(site: Site) -> None:
    listed = site.run("list").stdout
    assert "1.17.8" in listed and "1.18.0" in listed and "1.20.1" in listed


@pytest.mark.slow
def test_upgrade_moves_the_node_to_the_newer_bundles_release(site: Site) -> None:
    site.run("quick-start-node", "upgrade-operator")
    assert (site.dir / NEWER).is_file()
    plan = site.run("upgrade-node", install_options="--dry-run").stdout
    assert "1.17.8-1" in plan and "1.18.0-1" in plan, plan  # from which version to which
    assert dpkg_versions(site.node)[TOOLKIT] == "1.17.8-1"
    site.run("upgrade-node")
    assert dpkg_versions(site.node)[TOOLKIT] == "1.18.0-1"


@pytest.mark.slow
def test_a_held_node_upgrades_only_with_allow_held_and_stays_held(site: Site) -> None:
    site.run("quick-start-node", install_options="--hold")
    site.run("upgrade-operator")
    refused = site.run("upgrade-node", check=False)
    assert refused.returncode == 7, refused.stderr
    assert "--allow-held" in refused.stderr and "--unhold" in refused.stderr
    assert dpkg_versions(site.node)[TOOLKIT] == "1.17.8-1"
    site.run("upgrade-node", install_options="--allow-held")
    assert dpkg_versions(site.node)[TOOLKIT] == "1.18.0-1"
    assert TOOLKIT in _held(site.node)


def _held(root: Path) -> list[str]:
    out = subprocess.run(
        ["dpkg", f"--admindir={root}/var/lib/dpkg", "--get-selections"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()[1:] == ["hold"]]


@pytest.mark.slow
def test_roll_back_returns_the_node_to_the_older_bundle(site: Site) -> None:
    site.run("quick-start-node", "upgrade-operator", "upgrade-node")
    assert dpkg_versions(site.node)[TOOLKIT] == "1.18.0-1"
    site.run("rollback")
    assert dpkg_versions(site.node)[TOOLKIT] == "1.17.8-1"


@pytest.mark.slow
def test_pin_writes_a_lockfile_and_builds_exactly_its_release(site: Site) -> None:
    (site.dir / BUNDLE).unlink()
    site.run("pin")
    assert "1.17.8" in (site.dir / "gpu-airgap.lock").read_text()
    assert "1.17.8-1" in _inspect(site, BUNDLE)


@pytest.mark.slow
def test_switching_to_experimental_builds_the_release_candidate(site: Site) -> None:
    done = site.run("channel")
    assert "1.20.0~rc.1" in done.stdout
    assert "1.20.0~rc.1-1" in _inspect(site, "nvct-experimental.tar.zst")


@pytest.mark.slow
def test_rpm_nodes_get_their_target_in_the_same_bundle_and_the_same_node_command(site: Site) -> None:
    inspected = site.run("rpm").stdout
    assert "rpm-x86_64" in inspected and "deb-amd64" in inspected
    shutil.rmtree(site.node)
    seed_rpm_root(site.node, site.dir / "stand-ins")
    site.run("quick-start-node")
    installed = subprocess.run(
        [
            "rpm",
            "--root",
            str(site.node),
            "--dbpath",
            "/var/lib/rpm",
            "-q",
            "--qf",
            "%{VERSION}-%{RELEASE}",
            TOOLKIT,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.stdout == "1.17.8-1", installed.stderr


@pytest.mark.slow
def test_uninstall_restores_the_node(site: Site) -> None:
    site.run("quick-start-node", "uninstall")
    assert TOOLKIT not in dpkg_versions(site.node)
    assert (site.node / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG


@pytest.mark.slow
def test_many_nodes_renders_the_daemonset(site: Site) -> None:
    site.run("fleet")
    manifests = (site.dir / "gpu-airgap.yaml").read_text()
    assert "kind: DaemonSet" in manifests and BUNDLE in manifests
