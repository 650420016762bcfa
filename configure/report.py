"""``configure report``: the seed walk-through's five lines, and its evidence files.

The runtime walk-through this product grew from asks for exactly five lines (:data:`SEED_KEYS`);
``configure report`` prints those by default and the other facts with ``--all``. ``--evidence DIR``
writes the walk-through's evidence, every file derived from what is on disk under the root (the
engine's TOML read back, the CDI spec and the RuntimeClass manifest as written) and then read back
from ``DIR`` to prove it landed as meant:

==================== ==============================================================================
``report.txt``       the five lines
``default.txt``      ``DEFAULT=<the engine's default runtime>`` and ``WHY=``: ``runtimeclass`` while the
                     default is untouched (pods reach the runtime through the RuntimeClass),
                     ``set-as-default`` once configure made it the default
``parsed.txt``       ``version = N`` and ``runtimes = [...]`` from the TOML parse of the config files
``cdi-keys.txt``     the CDI spec's top-level keys, one a line, in file order
``runtimeclass.yaml`` the RuntimeClass manifest ``configure runtimeclass`` wrote
==================== ==============================================================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional

import yaml

from configure.cdi.spec import CDI_SPEC
from configure.changes import read_optional
from configure.runtimeclass import read_record, render_manifest
from plumbing.errors import ToolError, UsageError
from plumbing.fsutil import atomic_write, rooted

#: the walk-through's report, in its order
SEED_KEYS = ("CONFIG_VERSION", "RUNTIME", "RUNTIME_TYPE", "SYSTEMD_CGROUP", "HANDLER")
EVIDENCE_FILES = ("report.txt", "default.txt", "parsed.txt", "cdi-keys.txt", "runtimeclass.yaml")


def report_lines(facts: Mapping[str, str], *, every: bool = False) -> List[str]:
    """``KEY=value`` lines: the seed's five (those the engine has), or every fact with ``every``.

    An engine with none of the five (podman, lxc) shows all of its facts.
    """
    seed = [key for key in SEED_KEYS if key in facts]
    keys = list(facts) if every or not seed else seed
    return [f"{key}={facts[key]}" for key in keys]


@dataclass
class Evidence:
    """The evidence files' contents, and what could not be read back from the root."""

    files: Dict[str, bytes] = field(default_factory=dict)
    problems: List[str] = field(default_factory=list)


def gather(root: Path, facts: Mapping[str, str]) -> Evidence:
    """The evidence for ``facts`` (a containerd, Docker or CRI-O report) and the files under ``root``."""
    evidence = Evidence()
    evidence.files["report.txt"] = _text(report_lines(facts))
    if "DEFAULT" in facts:
        untouched = facts.get("DEFAULT_UNCHANGED", "true") == "true"
        why = "runtimeclass" if untouched else "set-as-default"
        evidence.files["default.txt"] = _text([f"DEFAULT={facts['DEFAULT']}", f"WHY={why}"])
    else:
        evidence.problems.append("the engine's configuration names no default runtime")
    if "CONFIG_VERSION" in facts and "RUNTIMES" in facts:
        names = [name for name in facts["RUNTIMES"].split(",") if name]
        evidence.files["parsed.txt"] = _text(
            [f"version = {facts['CONFIG_VERSION']}", f"runtimes = {json.dumps(names)}"]
        )
    else:
        evidence.problems.append("parsed.txt is containerd's (a TOML config with a version and runtimes)")
    _cdi_keys(root, evidence)
    _runtimeclass(root, evidence)
    return evidence


def _text(lines: List[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


def _cdi_keys(root: Path, evidence: Evidence) -> None:
    path = rooted(root, CDI_SPEC)
    raw = read_optional(path)
    if raw is None:
        evidence.problems.append(f"no CDI spec at {CDI_SPEC} (run `gpu-airgap configure cdi`)")
        return
    try:
        spec = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        evidence.problems.append(f"the CDI spec {CDI_SPEC} is not valid YAML ({exc.__class__.__name__})")
        return
    if not isinstance(spec, dict):
        evidence.problems.append(f"the CDI spec {CDI_SPEC} is not a mapping")
        return
    evidence.files["cdi-keys.txt"] = _text([str(key) for key in spec])


def _runtimeclass(root: Path, evidence: Evidence) -> None:
    record = read_record(root)
    if record is None:
        evidence.problems.append(
            "no RuntimeClass was written (run `gpu-airgap configure runtimeclass --output FILE`)"
        )
        return
    output: Optional[str] = record.get("output")
    if not output:  # printed to stdout back then: the record holds what it said
        evidence.files["runtimeclass.yaml"] = render_manifest(
            str(record.get("name", "nvidia")), str(record["handler"])
        ).encode()
        return
    raw = read_optional(rooted(root, output))
    if raw is None:
        evidence.problems.append(f"the RuntimeClass manifest {output} that configure wrote is gone")
        return
    evidence.files["runtimeclass.yaml"] = raw


def write(directory: Path, evidence: Evidence) -> List[Path]:
    """Write the evidence files into ``directory`` (made if missing; its parent must exist) and read each back.

    :raises UsageError: when ``directory``'s parent does not exist or ``directory`` is not a directory.
    :raises ToolError: when a file does not read back as written.
    """
    if not directory.parent.is_dir():
        raise UsageError(f"the directory of --evidence {directory} does not exist")
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--evidence {directory} exists and is not a directory")
    written = []
    for name in EVIDENCE_FILES:
        if name not in evidence.files:
            continue
        path = directory / name
        atomic_write(path, evidence.files[name])
        if path.read_bytes() != evidence.files[name]:
            raise ToolError(f"{path} does not read back as written")
        written.append(path)
    return written
