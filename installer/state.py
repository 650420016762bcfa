"""What the last install did, in ``ROOT/var/lib/gpu-airgap/state.json``: the record uninstall and status read.

The file names the bundle (the sha256 of its signed manifest) and its signer, the packages and
versions installed, the packages removed to make room, whether they are held, and every
configuration file changed with its backup (copied from the configure journal). An install writes
it as unfinished (``complete: false``) before its first change and as complete at the end, so a
run that was killed still leaves a record ``status`` reports and ``uninstall`` undoes. An
uninstall marks it ``uninstalling`` before its first change, so one that was killed is finished by
running it again.

Paths in the record are node paths, resolved under the current ``--root`` (a copied or moved root,
or the image booted as ``/``, uninstalls its own files). Records of older versions held host paths:
they are read without the root they were recorded under, like the configure journal's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from configure.changes import read_optional
from configure.journal import Journal
from configure.legacy_records import from_legacy, legacy_roots
from plumbing.errors import ConfigFormatError
from plumbing.fsutil import atomic_write, recorded_path, rooted

STATE_DIR = "/var/lib/gpu-airgap"
STATE_FILE = STATE_DIR + "/state.json"
SCHEMA = 2  #: 1 recorded host paths (with the --root prefix); 2 records node paths


@dataclass
class ChangedFile:
    """One configuration file the install wrote, and the copy of what it replaced."""

    engine: str
    path: str  #: node path
    backup: Optional[str]  #: node path; None when the file did not exist before
    sha256: str  #: digest of the bytes gpu-airgap wrote


@dataclass
class NodeState:
    """The record of one install (see the module docstring)."""

    bundle_id: str
    signer: str
    release: str
    target: str
    package_manager: str
    packages: Dict[str, str]  #: name -> version, in install order
    previous: Dict[str, Optional[str]] = field(default_factory=dict)  #: versions before the install
    removed: Dict[str, str] = field(default_factory=dict)  #: legacy packages removed first
    held: bool = False
    runtime_name: str = "nvidia"
    engines: List[str] = field(default_factory=list)  #: engines whose config the install changed
    #: engines whose config changed but which gpu-airgap did not restart yet (``--no-restart``, or a
    #: restart that never ran): ``gpu-airgap restart`` restarts them, a later install retries them
    restart_pending: List[str] = field(default_factory=list)
    cdi: str = ""  #: what happened to CDI, in words
    files: List[ChangedFile] = field(default_factory=list)
    installed_at: str = ""
    schema: int = SCHEMA
    #: False while an install is under way (or after one that was killed or could not be undone)
    complete: bool = True
    distro: Optional[str] = None  #: the containerd chosen with ``--distro`` (None: detected)
    #: the installed bundle's build time (its signed ``created``): a later install of the same release
    #: refuses a bundle built before it (a replayed older build) unless ``--allow-downgrade``
    built: str = ""
    channel: str = "stable"  #: the bundle's upstream channel (``experimental``: a release candidate)
    #: an uninstall is under way (or was killed): running ``uninstall`` again finishes it
    uninstalling: bool = False

    def unfinished(self) -> Optional[str]:
        """The problem to report when this record is of an install (or uninstall) that did not finish, else None."""
        if self.uninstalling:
            return "an uninstall did not finish; run `gpu-airgap uninstall` again to finish it"
        if self.complete:
            return None
        return (
            f"the install of release {self.release} (bundle {self.bundle_id[:16]}…) did not finish; run "
            "`gpu-airgap install` with that bundle again to finish it, or `gpu-airgap uninstall` to remove what it did"
        )

    def to_json(self) -> bytes:
        """Render as indented JSON with a trailing newline."""
        return (json.dumps(asdict(self), indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes, path: Path) -> NodeState:
        """Parse ``state.json``.

        :raises ConfigFormatError: when the file is not a state record this version understands.
        """
        try:
            raw: Dict[str, Any] = json.loads(data)
            files = [ChangedFile(**item) for item in raw.pop("files", [])]
            return cls(files=files, **raw)
        except (ValueError, TypeError) as exc:
            raise ConfigFormatError(
                path, "is not a gpu-airgap state record; move it away and reinstall"
            ) from exc


def state_path(root: Path) -> Path:
    """Where the state file lives under ``root``."""
    return rooted(root, STATE_FILE)


def load_state(root: Path) -> Optional[NodeState]:
    """The recorded state under ``root``, or None when nothing was installed by gpu-airgap.

    :raises ConfigFormatError: when it is not a state record, or names a file outside ``root``.
    """
    path = state_path(root)
    data = read_optional(path)
    if data is None:
        return None
    state = NodeState.from_json(data, path)
    if state.schema != SCHEMA:
        _from_legacy(state, root, path)
    for item in state.files:
        for recorded in (item.path, *([item.backup] if item.backup is not None else [])):
            recorded_path(root, recorded, path)  # refused before anyone acts on it
    return state


def _from_legacy(state: NodeState, root: Path, path: Path) -> None:
    """Give an older record's files (host paths) their node paths: without the root they were recorded under."""
    for item, old in zip(state.files, legacy_roots([item.backup for item in state.files], root)):
        item.path = from_legacy(item.path, old, path)
        item.backup = None if item.backup is None else from_legacy(item.backup, old, path)
    state.schema = SCHEMA


def host_path(root: Path, item: ChangedFile) -> Path:
    """Where the recorded file ``item`` is under ``root``."""
    return recorded_path(root, item.path, state_path(root))


def save_state(root: Path, state: NodeState) -> Path:
    """Write the state atomically (0600: it names backup files)."""
    path = state_path(root)
    atomic_write(path, state.to_json(), mode=0o600)
    return path


def changed_files(journal: Journal, engines: List[str]) -> List[ChangedFile]:
    """The journal's view of every file ``engines`` changed: the first backup, the last digest."""
    first: Dict[str, ChangedFile] = {}
    for entry in journal.entries():
        if entry.engine not in engines:
            continue
        if entry.path not in first:
            first[entry.path] = ChangedFile(entry.engine, entry.path, entry.backup, entry.sha256)
        else:
            first[entry.path].sha256 = entry.sha256
    return list(first.values())
