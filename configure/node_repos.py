"""The package repositories a node is configured with, and which of them compete with the toolkit we install.

A node that installs the toolkit from a gpu-airgap bundle keeps it only until a later ``apt-get
upgrade`` or ``dnf upgrade`` finds a newer ``nvidia-container-toolkit`` somewhere else: NVIDIA's
CUDA network repository (which carries every toolkit release), a DGX OS repository, the retired
``nvidia.github.io`` lists, or a distribution that packages the toolkit itself. This module reads
the node's own source files (under ``--root``) and names those repositories; the installer warns
about them and ``status`` says which repository an installed package is offered by.

* apt: ``/etc/apt/sources.list``, ``sources.list.d/*.list`` (one-line style) and ``*.sources``
  (deb822), as sources.list(5) describes them; ``deb-src`` and ``Enabled: no`` are skipped.
* yum/dnf: ``/etc/yum.repos.d/*.repo`` (``baseurl``/``mirrorlist``/``metalink``, ``enabled``); a
  section whose ``excludepkgs`` (or ``exclude``) already covers the toolkit, or whose
  ``includepkgs`` leaves it out, does not compete.
* A distribution repository competes only when apt's downloaded lists show it offering one of the
  toolkit's packages (every Debian node names deb.debian.org; few of them ever see the toolkit there).

The parsers are pure functions of text; :func:`node_sources` and :func:`apt_offers` are the readers; :mod:`configure.package_origins` uses them for ``status``.
"""

from __future__ import annotations

import configparser
import fnmatch
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from plumbing.fsutil import rooted_or_none

#: The packages whose source matters: the toolkit's four and their globs, as the pins name them.
TOOLKIT_GLOBS = ("nvidia-container-toolkit*", "libnvidia-container*")
APT_LISTS = "/var/lib/apt/lists"

#: (URL fragment, what it is): NVIDIA's repositories that carry the toolkit or its predecessors.
NVIDIA_REPOS: Tuple[Tuple[str, str], ...] = (
    ("developer.download.nvidia.com/compute/cuda/repos/", "NVIDIA's CUDA repository"),
    ("developer.download.nvidia.cn/compute/cuda/repos/", "NVIDIA's CUDA repository"),  # its China mirror
    ("repo.download.nvidia.com/baseos/", "a DGX OS repository"),
    ("repo.download.nvidia.com/dgx/", "a DGX OS repository"),
    ("international.download.nvidia.com/dgx/", "a DGX OS repository"),
    ("nvidia.github.io/nvidia-docker", "the retired nvidia-docker repository"),
    ("nvidia.github.io/nvidia-container-runtime", "the retired nvidia-container-runtime repository"),
    ("nvidia.github.io/libnvidia-container", "NVIDIA's public toolkit repository"),
)


@dataclass(frozen=True)
class RepoSource:
    """One repository URL a node's package manager reads, and the file that names it."""

    kind: str  #: "apt" or "yum"
    file: str  #: node path of the source file
    url: str
    section: str = ""  #: the .repo section (yum)
    suites: Tuple[str, ...] = ()  #: apt suites, e.g. ("jammy", "jammy-updates") or ("/",)


@dataclass(frozen=True)
class CompetingRepo:
    """A repository that could replace the toolkit on a later upgrade."""

    source: RepoSource
    what: str  #: e.g. "NVIDIA's CUDA repository"
    offers: Tuple[str, ...] = ()  #: "name version" the node's apt lists show it offering

    def warning(self, held: bool = False) -> str:
        """One sentence: the file, the URL and what a later upgrade could do (``held``: what stops it)."""
        upgrade = "apt-get upgrade" if self.source.kind == "apt" else "dnf upgrade"
        where = f"{self.source.file} [{self.source.section}]" if self.source.section else self.source.file
        named = f"{where} names {self.what} {self.source.url}"
        if self.offers:
            named += f" (it offers {', '.join(self.offers)})"
        if held:
            return f"{named}; the hold on the toolkit keeps a later `{upgrade}` from replacing it with its packages"
        advice = (
            f"give {' '.join(TOOLKIT_GLOBS)} Pin-Priority -1 from it in /etc/apt/preferences.d"
            if self.source.kind == "apt"
            else f"add excludepkgs={' '.join(TOOLKIT_GLOBS)} to that section"
        )
        return (
            f"{named}; a later `{upgrade}` could replace the toolkit this bundle installs with its packages: "
            f"install with --hold, or {advice} (docs/node.md)"
        )


# -- apt ---------------------------------------------------------------------------------------


def parse_one_line(text: str, file: str) -> List[RepoSource]:
    """The ``deb`` lines of a one-line-style file (``deb [options] URI suite [component...]``)."""
    found: List[RepoSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb ") and not line.startswith("deb\t"):
            continue
        rest = line[3:].strip()
        if rest.startswith("["):  # options may hold spaces inside the brackets
            rest = rest.partition("]")[2].strip()
        words = rest.split()
        if words:
            found.append(RepoSource("apt", file, words[0], suites=tuple(words[1:2])))
    return found


def parse_deb822(text: str, file: str) -> List[RepoSource]:
    """The enabled ``Types: deb`` stanzas of a ``.sources`` file, one source per URI."""
    found: List[RepoSource] = []
    for stanza in re.split(r"\n[ \t]*\n", text):
        fields: Dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and key:  # a folded continuation line
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        suites = tuple(fields.get("suites", "").split())
        found += [RepoSource("apt", file, uri, suites=suites) for uri in fields.get("uris", "").split()]
    return found


# -- yum / dnf ---------------------------------------------------------------------------------


def _covers(patterns: str, names: Iterable[str]) -> bool:
    """True when one of the space/comma-separated ``patterns`` matches one of ``names``."""
    globs = [p for p in re.split(r"[\s,]+", patterns) if p]
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs for name in names)


_PROBES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container1")


def parse_repo(text: str, file: str) -> List[RepoSource]:
    """The enabled sections of a ``.repo`` file that could offer the toolkit, one source per URL."""
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text, source=file)
    except configparser.Error:
        return []  # dnf refuses such a file too; it offers nothing
    found: List[RepoSource] = []
    for section in parser.sections():
        values = parser[section]
        if values.get("enabled", "1").strip().lower() in ("0", "false", "no", "off"):
            continue
        excluded = values.get("excludepkgs", "") + " " + values.get("exclude", "")
        if _covers(excluded, _PROBES):
            continue
        included = values.get("includepkgs", "")
        if included.strip() and not _covers(included, _PROBES):
            continue
        urls = " ".join(values.get(k, "") for k in ("baseurl", "mirrorlist", "metalink"))
        found += [RepoSource("yum", file, url, section=section) for url in re.split(r"[\s,]+", urls) if url]
    return found


# -- the node ----------------------------------------------------------------------------------


def _files(root: Path, directory: str, suffix: str) -> List[Tuple[str, Path]]:
    where = rooted_or_none(root, directory)
    if where is None or not where.is_dir():
        return []
    return [(f"{directory}/{p.name}", p) for p in sorted(where.glob(f"*{suffix}")) if p.is_file()]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def node_sources(root: Path) -> List[RepoSource]:
    """Every repository the node's apt and yum/dnf source files name, in the order the tools read them."""
    found: List[RepoSource] = []
    main = rooted_or_none(root, "/etc/apt/sources.list")
    if main is not None and main.is_file():
        found += parse_one_line(_read(main), "/etc/apt/sources.list")
    for name, path in _files(root, "/etc/apt/sources.list.d", ".list"):
        found += parse_one_line(_read(path), name)
    for name, path in _files(root, "/etc/apt/sources.list.d", ".sources"):
        found += parse_deb822(_read(path), name)
    for name, path in _files(root, "/etc/yum.repos.d", ".repo"):
        found += parse_repo(_read(path), name)
    return found


def nvidia_repo(url: str) -> Optional[str]:
    """What NVIDIA repository ``url`` is (``NVIDIA's CUDA repository``), or None for any other."""
    bare = url.split("://", 1)[-1]
    return next((what for fragment, what in NVIDIA_REPOS if bare.startswith(fragment)), None)


def competing(
    sources: Sequence[RepoSource], offers: Dict[str, List[Tuple[str, str]]], pinned_away: Sequence[str] = ()
) -> List[CompetingRepo]:
    """The sources that could replace the toolkit: NVIDIA's repositories, and any other whose apt lists offer it.

    :param offers: apt list URL (see :func:`apt_offers`) -> (name, version) it offers.
    :param pinned_away: origin patterns apt preferences forbid the toolkit from (:func:`apt_pinned_away`).
    """
    result: List[CompetingRepo] = []
    for source in sources:
        host = bare_url(source.url).split("/", 1)[0].rpartition("@")[2].partition(":")[0]
        if source.kind == "apt" and any(fnmatch.fnmatchcase(host, p) for p in pinned_away):
            continue
        offered = tuple(
            sorted(
                {f"{n} {v}" for url, found in offers.items() if _same_repo(url, source.url) for n, v in found}
            )
        )
        what = nvidia_repo(source.url)
        if what is None and offered:
            what = "a repository"
        if what is not None:
            result.append(CompetingRepo(source, what, offered))
    return result


def competing_notes(root: Path, package_format: str, names: Sequence[str], held: bool) -> List[str]:
    """The warnings for the repositories of the node's own package manager (``deb``: apt, ``rpm``: yum/dnf)
    that could replace ``names``; ``held``: the toolkit is held after the install.
    """
    kind = "apt" if package_format == "deb" else "yum"
    sources = [s for s in node_sources(root) if s.kind == kind]
    offers = apt_offers(root, names) if kind == "apt" else {}
    pinned_away = apt_pinned_away(root) if kind == "apt" else []
    return [r.warning(held=held) for r in competing(sources, offers, pinned_away)]


#: apt reads preferences.d files with no extension or ``.pref``, named from these characters (apt_preferences(5)).
_PREF_FILE = re.compile(r"^[A-Za-z0-9_.-]+$")


def apt_pinned_away(root: Path) -> List[str]:
    """Origins (host patterns) from which apt preferences never take the toolkit: ``Pin: origin HOST`` with a
    negative ``Pin-Priority`` for a ``Package:`` that covers ``nvidia-container-toolkit``.
    """
    texts: List[str] = []
    main = rooted_or_none(root, "/etc/apt/preferences")
    if main is not None and main.is_file():
        texts.append(_read(main))
    for name, path in _files(root, "/etc/apt/preferences.d", ""):
        base = Path(name).name
        if _PREF_FILE.match(base) and ("." not in base or base.endswith(".pref")):
            texts.append(_read(path))
    hosts: List[str] = []
    for text in texts:
        for stanza in re.split(r"\n[ \t]*\n", text):
            fields = {
                k.lower(): v.strip()
                for k, v in re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.MULTILINE)
            }
            pin, _, value = fields.get("pin", "").partition(" ")
            try:
                negative = int(fields.get("pin-priority", "0")) < 0
            except ValueError:
                continue
            if (
                pin == "origin"
                and negative
                and _covers(fields.get("package", ""), ["nvidia-container-toolkit"])
            ):
                hosts.append(value.strip().strip('"'))
    return hosts


def _same_repo(list_url: str, source_url: str) -> bool:
    """True when an apt list file's URL belongs to the repository at ``source_url``."""
    repo = bare_url(source_url)
    return list_url == repo or list_url.startswith(repo + "/")


def bare_url(url: str) -> str:
    """``url`` without its scheme and trailing slash, as apt's list file names keep it."""
    return url.split("://", 1)[-1].rstrip("/")


# -- apt's downloaded lists ----------------------------------------------------------------------


def list_url(file_name: str) -> str:
    """The URL (without scheme) an apt list file was fetched from: apt writes ``/`` as ``_`` and ``_`` as ``%5f``."""
    stem = file_name[: -len("_Packages")] if file_name.endswith("_Packages") else file_name
    return urllib.parse.unquote(stem.replace("_", "/"))


def packages_offered(text: str, names: Iterable[str]) -> List[Tuple[str, str]]:
    """(name, version) of every stanza of a ``Packages`` file whose package is one of ``names``.

    Only the wanted stanzas are looked at: a distribution's list runs to tens of megabytes.
    """
    wanted = "|".join(re.escape(n) for n in sorted(set(names)))
    if not wanted:
        return []
    found: List[Tuple[str, str]] = []
    for match in re.finditer(rf"^Package:[ \t]*({wanted})[ \t]*$", text, flags=re.MULTILINE):
        end = text.find("\n\n", match.end())
        stanza = text[match.end() : end if end >= 0 else len(text)]
        version = re.search(r"^Version:[ \t]*(\S+)", stanza, flags=re.MULTILINE)
        if version is not None:
            found.append((match.group(1), version.group(1)))
    return found


def apt_offers(root: Path, names: Iterable[str]) -> Dict[str, List[Tuple[str, str]]]:
    """URL (no scheme) of each downloaded, uncompressed apt ``Packages`` list -> the (name, version) of ``names`` it offers."""
    wanted = list(names)
    offers: Dict[str, List[Tuple[str, str]]] = {}
    for name, path in _files(root, APT_LISTS, "_Packages"):
        text = _read(path)
        if not any(n in text for n in wanted):  # most lists never mention the toolkit: skip parsing them
            continue
        found = packages_offered(text, wanted)
        if found:
            offers[list_url(Path(name).name)] = found
    return offers
