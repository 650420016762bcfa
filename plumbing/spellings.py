"""One vocabulary: the old spellings every command still takes (with a warning), and hints for foreign ones.

The policy (docs/reference.md, "Old spellings"): an old option name works on every command that has
its new name, warns once on stderr and goes in the next release. A name from another tool
(nvidia-ctk's ``runtime configure`` flags) or one that means something else here (``mirror sync
--mirror``) is refused, exit 2, with one sentence naming ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Dict, List, Optional, Tuple

import click

#: old name -> today's, wherever the command has today's and not the old one itself
OLD_SPELLINGS: Dict[str, str] = {
    "--out": "--output",  # what a command writes
    "--dest": "--mirror",  # a mirror that is read (mirror sync writes one and keeps --dest)
    "--engine": "--runtime",  # the container engine (restart)
}

#: an option that was a flag -> what it means written bare (no value, or another option next), wherever
#: the command's option takes that value
BARE: Dict[str, str] = {"--cdi": "on"}

#: what every deprecation warning promises
REMOVAL = "it will be removed in the next release"

#: nvidia-ctk runtime configure's flags -> ours (the engine is the command here, not --runtime)
CTK_FLAGS: Dict[str, str] = {
    "--enable-cdi": "--cdi on",
    "--cdi.enabled": "--cdi on",
    "--cdi.enable": "--cdi on",
    "--nvidia-set-as-default": "--set-as-default",
    "--set-as-default": "--set-as-default",
    "--config": "--config",
    "--drop-in-config": "--drop-in",
    "--nvidia-runtime-name": "--runtime-name",
    "--nvidia-runtime-path": "--runtime-path",
    "--runtime-path": "--runtime-path",
    "--dry-run": "--dry-run",
}
#: the nvidia-ctk flags above that take a value
_CTK_VALUED = {
    "--config",
    "--drop-in-config",
    "--nvidia-runtime-name",
    "--nvidia-runtime-path",
    "--runtime-path",
}

#: (command path, option) -> the option meant, for names that mean something else here
MEANT: Dict[Tuple[str, str], str] = {
    ("mirror sync", "--mirror"): "--dest",
    ("mirror sync", "--output"): "--dest",
}


def _options(command: click.Command) -> Dict[str, click.Option]:
    return {
        name: p
        for p in command.params
        if isinstance(p, click.Option)
        for name in (*p.opts, *p.secondary_opts)
    }


def _bare_value(options: Dict[str, click.Option], token: str, following: Optional[str]) -> Optional[str]:
    """What the old flag ``token`` means when ``following`` (the next word) is not its value, or None."""
    meant = BARE.get(token)
    choices = getattr(options[token].type, "choices", ()) if token in options else ()
    if meant is None or meant not in choices:
        return None
    return meant if following is None or (following.startswith("-") and following not in choices) else None


def modernize(command: click.Command, args: Sequence[str]) -> Tuple[List[str], List[str]]:
    """``args`` of ``command`` in today's spellings (before ``--``), and one warning per old spelling found."""
    options = _options(command)
    out: List[str] = []
    warnings: List[str] = []
    for index, token in enumerate(args):
        if token == "--":
            out.extend(args[index:])
            break
        name, eq, value = token.partition("=")
        new = OLD_SPELLINGS.get(name)
        if token.startswith("--") and new in options and name not in options:
            warnings.append(f"{name} is deprecated here; use {new} ({REMOVAL})")
            token = f"{new}={value}" if eq else new
        out.append(token)
        meant = _bare_value(options, token, args[index + 1] if index + 1 < len(args) else None)
        if meant is not None:
            warnings.append(f"{token} without a value is deprecated; write {token} {meant} ({REMOVAL})")
            out.append(meant)
    return out, list(dict.fromkeys(warnings))


def _ctk_translation(args: Sequence[str]) -> str:
    """The ``gpu-airgap configure ENGINE ...`` line that does what nvidia-ctk's ``runtime configure ARGS`` does."""
    engine = "docker"  # nvidia-ctk's default
    words: List[str] = []
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name == "--runtime" or name in _CTK_VALUED:
            if not eq and i + 1 < len(args):
                i += 1
                value = args[i]
            if name == "--runtime":
                engine = value
            else:
                words += [CTK_FLAGS[name], value]
        elif name in CTK_FLAGS:
            words.append(CTK_FLAGS[name])
        i += 1
    return " ".join(["gpu-airgap configure", engine, *words])


def foreign_command(args: Sequence[str]) -> Optional[str]:
    """The sentence for nvidia-ctk's ``runtime configure ...`` typed after ``gpu-airgap``, or None."""
    if list(args[:2]) != ["runtime", "configure"]:
        return None
    return f"runtime configure is nvidia-ctk's command; here it is: {_ctk_translation(args[2:])}"


def hint(path: str, option: str, args: Sequence[str]) -> Optional[str]:
    """The sentence refusing ``option``, unknown to the command ``path`` (``mirror sync``), or None for click's.

    :param args: the whole command line, to translate an nvidia-ctk line as a whole.
    """
    meant = MEANT.get((path, option))
    if meant is not None:
        return f"{path} has no {option}; did you mean {meant}?"
    if path == "configure" and (option == "--runtime" or option in CTK_FLAGS):
        rest = list(args[list(args).index("configure") + 1 :]) if "configure" in args else []
        return f"{option} is nvidia-ctk's spelling; here the engine is the command: {_ctk_translation(rest)}"
    if path.startswith("configure ") and option == "--runtime":
        return f"{path} already names the engine; leave {option} out"
    if option in CTK_FLAGS and CTK_FLAGS[option] != option:
        return f"{option} is nvidia-ctk's spelling; did you mean {CTK_FLAGS[option]}?"
    return None
