"""Registry credentials and the ``WWW-Authenticate`` challenge grammar (pure, apart from reading a file).

Credentials come from the command line (``--username`` and ``--password-stdin``) or, failing that,
from Docker's client config: ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``, whose
``auths`` map a registry (``host:port``, optionally written as a URL) to ``auth`` (base64 of
``user:password``) or ``identitytoken`` (an OAuth2 refresh token, as ``docker login`` stores for
Harbor and other token services). Credential helpers (``credsStore``, ``credHelpers``) run
programs and are not consulted: pass the credentials on the command line instead.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Mapping, Optional

from plumbing.errors import ConfigFormatError

_PARAM_RE = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]*))\s*(?:,|$)')


@dataclass(frozen=True)
class Credentials:
    """A user name and password, or an identity (refresh) token; ``source`` says where they came from."""

    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)
    source: str = "the command line"

    def basic(self) -> str:
        """The ``Authorization`` value for HTTP basic auth."""
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


@dataclass(frozen=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` header: its scheme (lowercase) and parameters."""

    scheme: str
    params: Dict[str, str]


def parse_challenge(header: str) -> Challenge:
    """Parse ``Bearer realm="…",service="…",scope="…"`` or ``Basic realm="…"``.

    Registries send one challenge; a malformed parameter list yields the parameters before it.
    """
    scheme, _, rest = header.strip().partition(" ")
    params: Dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        match = _PARAM_RE.match(rest, pos)
        if not match or match.end() == pos:
            break
        value = match.group(2) if match.group(2) is not None else match.group(3)
        params[match.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
        pos = match.end()
    return Challenge(scheme.lower(), params)


def docker_config_path(environ: Mapping[str, str]) -> Path:
    """Where Docker's client config lives: ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``."""
    directory = environ.get("DOCKER_CONFIG")
    if directory:
        return Path(directory) / "config.json"
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    return home / ".docker" / "config.json"


def _registry_key(key: str) -> str:
    """``https://HOST:PORT/v1/`` and ``HOST:PORT`` both name ``host:port``."""
    key = re.sub(r"^[a-z]+://", "", key.strip().lower())
    return key.split("/", 1)[0]


def from_docker_config(host: str, environ: Mapping[str, str]) -> Optional[Credentials]:
    """The credentials Docker's config stores for ``host`` (``host:port``), or None.

    :raises ConfigFormatError: when the file exists but cannot be read as Docker's config.
    """
    path = docker_config_path(environ)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigFormatError(path, f"cannot be read ({exc.strerror or exc})") from exc
    try:
        doc = json.loads(raw)
        auths = doc.get("auths") or {}
        entries = {_registry_key(k): v for k, v in auths.items()}
    except (ValueError, AttributeError) as exc:
        raise ConfigFormatError(path, 'is not Docker\'s JSON client config (an object with "auths")') from exc
    entry = entries.get(host.lower())
    if not isinstance(entry, dict):
        return None
    source = f"{path} ({host})"
    if entry.get("identitytoken"):
        return Credentials(
            username=str(entry.get("username", "")), identity_token=str(entry["identitytoken"]), source=source
        )
    if entry.get("auth"):
        try:
            user, sep, password = (
                base64.b64decode(str(entry["auth"]), validate=True).decode("utf-8").partition(":")
            )
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ConfigFormatError(
                path, f'has an "auth" for {host} that is not base64 of user:password'
            ) from exc
        if not sep:
            raise ConfigFormatError(path, f'has an "auth" for {host} that is not base64 of user:password')
        return Credentials(username=user, password=password, source=source)
    if entry.get("username") and entry.get("password"):
        return Credentials(username=str(entry["username"]), password=str(entry["password"]), source=source)
    return None
