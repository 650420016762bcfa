"""Rootless podman (``configure podman --user NAME``): what that user's podman reads from ``~/.config``.

A user's podman reads the system's containers.conf files and then its own
``~/.config/containers/containers.conf``, whose keys win. So:

* **CDI**: the spec stays system-wide (``/etc/cdi``, ``/var/run/cdi``); nothing is written for the
  user. ``verify`` checks what would still keep the devices from them: a ``cdi_spec_dirs`` of
  their own that leaves out the spec's directory, and GPU device nodes they may not open.
* **Hook**: without a ``hooks_dir`` of its own a rootless podman reads only the system default,
  and NVIDIA's hook needs other settings for an unprivileged caller (no cgroups). So we write,
  owned by the user: the hook to ``~/.config/containers/oci/hooks.d``, that directory added to
  ``hooks_dir`` in their containers.conf (after the directories they read now), and
  ``~/.config/nvidia-container-runtime/config.toml`` with ``no-cgroups = true``, which the hook
  reads through its ``-config`` flag (the system's config stays as root's containers need it).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from configure import tomledit
from configure.changes import FileChange, json_change, read_optional
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted
from plumbing.textio import decode_utf8

USER_CONF = ".config/containers/containers.conf"
USER_HOOKS_DIR = ".config/containers/oci/hooks.d"
USER_TOOLKIT_CONF = ".config/nvidia-container-runtime/config.toml"


@dataclass(frozen=True)
class User:
    """An account from the node's ``/etc/passwd``."""

    name: str
    uid: int
    gid: int
    home: str  #: node path

    def path(self, relative: str) -> str:
        """A node path under the home directory."""
        return posixpath.join(self.home, relative)


def lookup_user(root: Path, name: str) -> User:
    """``name`` in ``<root>/etc/passwd``.

    :raises UsageError: when there is no such account (or it has no absolute home).
    """
    raw = read_optional(rooted(root, "/etc/passwd")) or b""
    for line in raw.decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if len(fields) >= 6 and fields[0] == name and fields[2].isdigit() and fields[3].isdigit():
            if not fields[5].startswith("/"):
                break
            return User(name, int(fields[2]), int(fields[3]), fields[5])
    raise UsageError(f"--user {name}: no such account with a home directory in {root}/etc/passwd")


def user_conf_files(system: Sequence[str], user: Optional[User]) -> Tuple[str, ...]:
    """The containers.conf files ``user``'s podman reads (root's when None), weakest first."""
    return (*system, user.path(USER_CONF)) if user else tuple(system)


def plan_hook(
    root: Path, user: User, hook: Dict[str, Any], system_dirs: Sequence[str]
) -> Tuple[List[FileChange], str]:
    """The user's hook file, containers.conf and toolkit config; returns ``(changes, hook file node path)``.

    :param hook: the hook JSON as root's podman gets it; its ``-config`` flag is added here.
    :param system_dirs: the hooks directories the user's podman reads now.
    """
    owner = (user.uid, user.gid)
    for relative in (USER_CONF, USER_TOOLKIT_CONF, posixpath.join(USER_HOOKS_DIR, "oci-nvidia-hook.json")):
        refuse_links_in_home(root, user, relative)
    hooks_dir = user.path(USER_HOOKS_DIR)
    hook_file = posixpath.join(hooks_dir, "oci-nvidia-hook.json")
    args = list(hook["hook"]["args"])
    hook = {
        **hook,
        "hook": {**hook["hook"], "args": [args[0], f"-config={user.path(USER_TOOLKIT_CONF)}", *args[1:]]},
    }
    changes = [
        _toml_change(
            root,
            user.path(USER_CONF),
            {"engine": {"hooks_dir": [*dict.fromkeys([*system_dirs, hooks_dir])]}},
            owner,
        ),
        _toml_change(
            root, user.path(USER_TOOLKIT_CONF), {"nvidia-container-cli": {"no-cgroups": True}}, owner
        ),
        json_change(rooted(root, hook_file), hook, owner),
    ]
    return changes, hook_file


def refuse_links_in_home(root: Path, user: User, relative: str) -> None:
    """Refuse a symbolic link on the way from ``user``'s home to ``relative`` below it.

    We write there as root, and the user owns the home: a link they planted (``~/.config`` to
    ``/etc``) would turn our write into a write to a system file.

    :raises ConfigFormatError: naming the link (exit 5: the config cannot be changed safely).
    """
    home = rooted(root, user.home)
    path = home
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            shown = posixpath.join(user.home, str(path.relative_to(home)))
            raise ConfigFormatError(
                shown, f"a symbolic link in {user.name}'s home; refusing to write through it as root"
            )


def device_problems(root: Path, user: User, nodes: Sequence[str]) -> List[str]:
    """GPU device nodes ``user`` may not open for reading and writing (by mode, owner and group)."""
    problems: List[str] = []
    groups = group_ids(root, user)
    for node in nodes:
        try:
            info = rooted(root, node).stat()
        except OSError:
            continue  # a missing node is the spec check's to report
        if info.st_uid == user.uid:
            ok = info.st_mode & 0o600 == 0o600
        elif info.st_gid in groups:
            ok = info.st_mode & 0o060 == 0o060
        else:
            ok = info.st_mode & 0o006 == 0o006
        if not ok:
            problems.append(f"{node} (mode {info.st_mode & 0o777:o}) cannot be opened by {user.name}")
    return problems


def group_ids(root: Path, user: User) -> Set[int]:
    """``user``'s primary group and the groups ``<root>/etc/group`` lists them in (``video``, ``render``)."""
    ids = {user.gid}
    raw = read_optional(rooted(root, "/etc/group")) or b""
    for line in raw.decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[2].isdigit() and user.name in fields[3].split(","):
            ids.add(int(fields[2]))
    return ids


def _toml_change(root: Path, node_path: str, desired: Dict[str, Any], owner: Tuple[int, int]) -> FileChange:
    path = rooted(root, node_path)
    old = read_optional(path)
    doc = tomledit.parse_text("" if old is None else decode_utf8(old, path), path)
    tomledit.merge(doc, desired, path=path)
    return FileChange(path, old, tomledit.render(doc), mode=0o644, owner=owner)
