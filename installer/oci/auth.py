"""Which ``Authorization`` header a registry request carries, learnt from the registry's challenges.

No I/O here: :class:`Authorizer` keeps what the registry taught (basic auth, bearer tokens per
repository and actions) and builds the token request; the client sends it (one module owns HTTP).
The flow is distribution's (and Harbor's): ``401`` with ``WWW-Authenticate: Basic …`` means send
the credentials on every request; ``Bearer realm=…,service=…,scope=…`` means ask the realm for a
token — ``GET`` with basic credentials (or none: an anonymous token), or the OAuth2 refresh-token
``POST`` with Docker's ``identitytoken`` — and retry. Credentials never go to a plain-http realm
unless the user allowed plain http (``--plain-http``) or the realm is on this host (loopback).
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from installer.oci.credentials import Challenge, Credentials
from installer.oci.errors import RegistryAuthError
from installer.oci.reference import is_loopback_host

Actions = Tuple[str, ...]


@dataclass(frozen=True)
class TokenRequest:
    """The HTTP request that asks a realm for a token."""

    method: str
    url: str
    headers: Dict[str, str]
    body: Optional[bytes] = None


#: Sends a token request and returns the status and the (small) body.
TokenFetcher = Callable[[TokenRequest], Tuple[int, bytes]]


class Authorizer:
    """What to send to ``host``: nothing, basic credentials, or a bearer token for the repository and actions."""

    def __init__(
        self,
        host: str,
        credentials: Optional[Credentials],
        fetch: TokenFetcher,
        *,
        plain_http: Callable[[], bool],
    ) -> None:
        self.host = host
        self.credentials = credentials
        self._fetch = fetch
        self._plain_http = plain_http  #: whether the user allowed plain http (--plain-http)
        self._basic = False
        self._tokens: Dict[Tuple[str, Actions], str] = {}

    def header(self, repository: str, actions: Actions) -> Optional[str]:
        """The ``Authorization`` value for a request, or None before any challenge."""
        if self._basic and self.credentials is not None:
            return self.credentials.basic()
        token = self._tokens.get((repository, actions))
        if token is None:  # a push token also covers pulls
            token = next(
                (
                    t
                    for (repo, granted), t in self._tokens.items()
                    if repo == repository and set(actions) <= set(granted)
                ),
                None,
            )
        return f"Bearer {token}" if token else None

    def learn(self, challenge: Challenge, repository: str, actions: Actions) -> None:
        """Act on a ``401``'s challenge so the retry can succeed.

        :raises RegistryAuthError: no credentials to offer, a refused token request, or an unknown scheme.
        """
        creds = self.credentials
        if challenge.scheme == "basic":
            if creds is None or not creds.password:
                raise self.refused(repository)
            self._basic = True
        elif challenge.scheme == "bearer" and challenge.params.get("realm"):
            token = self._token(challenge, repository, actions)
            # the token just refused (expired, or too narrow) must not be picked again for this repository
            self._tokens = {key: value for key, value in self._tokens.items() if key[0] != repository}
            self._tokens[(repository, actions)] = token
        else:
            raise RegistryAuthError(
                f"{self.host} asks for an authentication scheme we do not speak ({challenge.scheme or 'none'})"
            )

    def token_request(self, challenge: Challenge, repository: str, actions: Actions) -> TokenRequest:
        """The request for a token the challenge asks for (pure)."""
        realm = challenge.params["realm"]
        creds = self.credentials
        self._check_realm(realm, sending_secrets=creds is not None)
        scope = challenge.params.get("scope") or f"repository:{repository}:{','.join(actions)}"
        fields = {"service": challenge.params.get("service", ""), "scope": scope}
        if creds is not None and creds.identity_token:
            # OAuth2 refresh-token grant (what ``docker login`` stored for a token service): POST a form.
            form = {
                **fields,
                "grant_type": "refresh_token",
                "refresh_token": creds.identity_token,
                "client_id": "gpu-airgap",
            }
            data = urllib.parse.urlencode(form).encode()
            headers = {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": str(len(data))}
            return TokenRequest("POST", realm, headers, data)
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(fields)
        return TokenRequest("GET", url, {"Authorization": creds.basic()} if creds is not None else {})

    def _token(self, challenge: Challenge, repository: str, actions: Actions) -> str:
        realm = challenge.params["realm"]
        status, body = self._fetch(self.token_request(challenge, repository, actions))
        if status in (401, 403):
            raise self.refused(repository, by=f"the token service {realm}")
        if status != 200:
            raise RegistryAuthError(f"the token service {realm} failed with HTTP {status}")
        try:
            doc = json.loads(body)
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryAuthError(f"the token service {realm} answered without a token")
        return token

    def _check_realm(self, realm: str, *, sending_secrets: bool) -> None:
        parsed = urllib.parse.urlsplit(realm)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise RegistryAuthError(f"{self.host} names a token realm that is not an http(s) URL ({realm!r})")
        # plain http carries secrets only where the user allowed it (--plain-http) or never leaves the host
        local = is_loopback_host(parsed.hostname or "")
        if sending_secrets and parsed.scheme == "http" and not (self._plain_http() or local):
            raise RegistryAuthError(
                f"{self.host} asks us to send credentials to {realm} over plain http; refusing"
            )

    def who(self) -> str:
        """``user 'NAME'`` or ``anonymous``, for messages."""
        creds = self.credentials
        return f"user {creds.username!r}" if creds is not None and creds.username else "anonymous"

    def refused(self, repository: str, by: str = "") -> RegistryAuthError:
        """The one-sentence error for a registry (or token service) that will not let us in."""
        creds = self.credentials
        by = by or self.host
        if creds is None:
            return RegistryAuthError(
                f"{by} requires credentials for {repository}: run `docker login {self.host}` or pass --username and --password-stdin"
            )
        who = f"user {creds.username!r}" if creds.username else "the identity token"
        return RegistryAuthError(
            f"{by} refused the credentials of {who} from {creds.source} for {repository} (HTTP 401)"
        )
