"""Choose the toolkit release and the closure of packages it needs (pure: no I/O).

The algorithm is a small backtracking search over Depends/Requires, like apt's or dnf's but with
one preference they lack: **release-train pinning**. Before 1.18.0 the toolkit only asks for
``libnvidia-container-tools (>= V)`` and tools only for ``libnvidia-container1 (>= V)``, so apt
(and a plain "newest satisfying" resolver) silently picks the newest tools and library. Among the
candidates that satisfy a constraint we therefore prefer, in order: the root's exact version, the
root's upstream version, then the newest. The result is the four packages at one release whenever
the constraints allow it, and still a valid set when they do not.

Relations to packages the repository does not carry (libc6, libcap2, glibc, ...) are recorded as
node requirements; the node's own package manager must satisfy them. Breaks/Conflicts against
packages outside the set (the legacy nvidia-container-runtime, nvidia-docker) are reported.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from mirror.errors import UnresolvableDependency
from mirror.model import Package, PackageFormat, Relation
from mirror.release.selectors import VersionSelector
from mirror.release.versions import satisfies, sort_key, upstream_version

DEFAULT_ROOT = "nvidia-container-toolkit"
#: Search steps before we give up; NVIDIA's repos resolve in a few dozen.
_MAX_STEPS = 20_000


@dataclass(frozen=True)
class NodeRequirement:
    """A dependency the repository cannot satisfy, left to the node: ``libc6 (>= 2.14)``."""

    package: str  #: the package in the set that needs it
    alternatives: tuple[Relation, ...]

    def __str__(self) -> str:
        """The relation as a Depends line would write it."""
        return " | ".join(str(rel) for rel in self.alternatives)


@dataclass(frozen=True)
class BreaksReport:
    """A Breaks/Conflicts of a chosen package against a package outside the set."""

    package: str  #: the chosen package that declares it
    kind: str  #: "Breaks" or "Conflicts"
    relation: Relation

    def __str__(self) -> str:
        """One line for a report: ``nvidia-container-toolkit Breaks nvidia-container-runtime (<= 3.5.0-1)``."""
        return f"{self.package} {self.kind} {self.relation}"


@dataclass(frozen=True)
class Resolution:
    """The chosen set, in install order (dependencies first)."""

    packages: tuple[Package, ...]
    toolkit_version: str  #: full version of the root package
    node_requirements: tuple[NodeRequirement, ...]
    breaks: tuple[BreaksReport, ...]


def resolve(
    packages: Sequence[Package],
    selector: VersionSelector,
    fmt: PackageFormat,
    *,
    root: str = DEFAULT_ROOT,
) -> Resolution:
    """Select ``root`` by ``selector`` and resolve its dependency closure within ``packages``.

    :param packages: every package of one repository (one arch plus ``all``/``noarch``).
    :param selector: which root version to take.
    :param fmt: deb or rpm: decides version comparison.
    :param root: the package the operator asked for.
    :raises UnresolvableDependency: when no root version matches or a constraint cannot be met.

    Example::

        res = resolve(pkgs, VersionSelector.parse("1.17.8"), PackageFormat.DEB)
        [p.version for p in res.packages]  # ['1.17.8-1'] * 4
    """
    return _Resolver(packages, fmt).run(selector, root)


def resolve_each(
    packages: Sequence[Package], fmt: PackageFormat, *, root: str = DEFAULT_ROOT, skip: Collection[str] = ()
) -> list[Resolution]:
    """Resolve every version of ``root`` in ``packages`` on its own (oldest first), except those in ``skip``.

    Used by ``--version all``: a full mirror records each release it can offer a bundle for.
    Versions whose closure the repository cannot satisfy are left out; their files are still
    mirrored, only no release names them.
    """
    versions = sorted({p.version for p in packages if p.name == root} - set(skip), key=sort_key(fmt))
    resolved = []
    for version in versions:
        try:
            resolved.append(resolve(packages, VersionSelector.parse(version), fmt, root=root))
        except UnresolvableDependency:
            continue
    return resolved


class _Resolver:
    def __init__(self, packages: Sequence[Package], fmt: PackageFormat) -> None:
        self.fmt = fmt
        self.by_name: dict[str, list[Package]] = defaultdict(list)
        self.providers: dict[str, list[tuple[Package, Relation]]] = defaultdict(list)
        for package in packages:
            self.by_name[package.name].append(package)
            for provided in package.provides:
                self.providers[provided.name].append((package, provided))
        key = sort_key(fmt)
        for versions in self.by_name.values():
            versions.sort(key=lambda p: key(p.version), reverse=True)  # newest first
        self.steps = 0
        self.failure: tuple[str, str] | None = None

    def run(self, selector: VersionSelector, root: str) -> Resolution:
        if root not in self.by_name:
            raise UnresolvableDependency("the version selector", root, "the repository has no such package")
        chosen_version = selector.choose([p.version for p in self.by_name[root]], self.fmt)
        if chosen_version is None:
            raise UnresolvableDependency(
                "the version selector", f"{root} {selector}", "the repository has no such version"
            )
        roots = [p for p in self.by_name[root] if p.version == chosen_version]
        self.train = chosen_version
        for candidate in roots:
            solved = self._solve({root: candidate}, list(self._pending(candidate)), [])
            if solved is not None:
                chosen, node_reqs = solved
                return Resolution(
                    packages=self._install_order(chosen, root),
                    toolkit_version=chosen_version,
                    node_requirements=tuple(_dedupe(node_reqs)),
                    breaks=self._breaks(chosen),
                )
        package, constraint = self.failure or (root, chosen_version)
        raise UnresolvableDependency(package, constraint)

    @staticmethod
    def _pending(package: Package) -> list[tuple[Package, tuple[Relation, ...]]]:
        return [(package, group) for group in package.depends]

    def _solve(
        self,
        chosen: dict[str, Package],
        pending: list[tuple[Package, tuple[Relation, ...]]],
        node_reqs: list[NodeRequirement],
    ) -> tuple[dict[str, Package], list[NodeRequirement]] | None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise UnresolvableDependency(
                "the resolver", "a dependency search within limits", "too many alternatives"
            )
        while pending:
            requirer, group = pending[0]
            if any(self._chosen_satisfies(chosen, rel) for rel in group):
                pending = pending[1:]
                continue
            if not any(self._known(rel.name) for rel in group):
                node_reqs = [*node_reqs, NodeRequirement(requirer.name, group)]
                pending = pending[1:]
                continue
            candidates = self._candidates(chosen, group)
            if not candidates:
                if self.failure is None:  # the first dead end names the real culprit
                    self.failure = (requirer.name, " | ".join(str(rel) for rel in group))
                return None
            for candidate in candidates:
                result = self._solve(
                    {**chosen, candidate.name: candidate}, pending[1:] + self._pending(candidate), node_reqs
                )
                if result is not None:
                    return result
            return None
        return chosen, node_reqs

    def _known(self, name: str) -> bool:
        return name in self.by_name or name in self.providers

    def _chosen_satisfies(self, chosen: dict[str, Package], rel: Relation) -> bool:
        package = chosen.get(rel.name)
        if package is not None and satisfies(package.version, rel.op, rel.version, self.fmt):
            return True
        return any(
            chosen.get(provider.name) is provider and self._provided_satisfies(provided, rel)
            for provider, provided in self.providers.get(rel.name, [])
        )

    def _provided_satisfies(self, provided: Relation, rel: Relation) -> bool:
        if rel.op is None:
            return True
        return provided.version is not None and satisfies(provided.version, rel.op, rel.version, self.fmt)

    def _candidates(self, chosen: dict[str, Package], group: tuple[Relation, ...]) -> list[Package]:
        """Packages that would satisfy ``group``, best first, skipping clashes with ``chosen``."""
        out: list[Package] = []
        for rel in group:
            matching = [
                p
                for p in self.by_name.get(rel.name, [])
                if satisfies(p.version, rel.op, rel.version, self.fmt)
            ]
            matching += [
                p
                for p, provided in self.providers.get(rel.name, [])
                if self._provided_satisfies(provided, rel)
            ]
            matching.sort(key=self._preference)
            out += [
                p for p in matching if p not in out and p.name not in chosen and not self._clashes(chosen, p)
            ]
        return out

    def _preference(self, package: Package) -> int:
        # Stable sort on newest-first lists: exact train version, then same upstream, then newest.
        if package.version == self.train:
            return 0
        if upstream_version(package.version) == upstream_version(self.train):
            return 1
        return 2

    def _clashes(self, chosen: dict[str, Package], candidate: Package) -> bool:
        def hits(by: Package, target: Package) -> bool:
            return any(
                rel.name == target.name and satisfies(target.version, rel.op, rel.version, self.fmt)
                for group in (*by.breaks, *by.conflicts)
                for rel in group
            )

        return any(hits(candidate, other) or hits(other, candidate) for other in chosen.values())

    def _install_order(self, chosen: dict[str, Package], root: str) -> tuple[Package, ...]:
        # Longest dependency path from the root, deepest first, is a valid install order
        # (lib1, tools, base, toolkit); ties break by name so the order is stable.
        depth: dict[str, int] = {root: 0}
        frontier = [root]
        for _ in range(len(chosen)):
            following = []
            for name in frontier:
                for group in chosen[name].depends:
                    for rel in group:
                        target = self._provider_in(chosen, rel)
                        if target and depth.get(target, -1) < depth[name] + 1 and target != root:
                            depth[target] = depth[name] + 1
                            following.append(target)
            frontier = following
            if not frontier:
                break
        return tuple(sorted(chosen.values(), key=lambda p: (-depth.get(p.name, 0), p.name)))

    def _provider_in(self, chosen: dict[str, Package], rel: Relation) -> str | None:
        if rel.name in chosen:
            return rel.name
        for provider, _ in self.providers.get(rel.name, []):
            if chosen.get(provider.name) is provider:
                return provider.name
        return None

    def _breaks(self, chosen: dict[str, Package]) -> tuple[BreaksReport, ...]:
        out = []
        for package in chosen.values():
            for kind, groups in (("Breaks", package.breaks), ("Conflicts", package.conflicts)):
                for group in groups:
                    out += [BreaksReport(package.name, kind, rel) for rel in group if rel.name not in chosen]
        return tuple(out)


def _dedupe(reqs: list[NodeRequirement]) -> list[NodeRequirement]:
    seen: set[tuple[str, str]] = set()
    out = []
    for req in reqs:
        key = (req.package, str(req))
        if key not in seen:
            seen.add(key)
            out.append(req)
    return out
