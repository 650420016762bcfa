"""Carry a signed bundle through an OCI registry (distribution, Harbor, …): push, pull, install.

The node side runs from the zipapp on python3.9, so this package uses the standard library only
(urllib, ssl, json, hashlib, base64); the connected side (``mirror``) builds on the same client.

- :mod:`installer.oci.reference` — ``oci://HOST[:PORT]/REPO:TAG|@sha256:…`` (pure).
- :mod:`installer.oci.artifact` — the artifact's media types and annotations, building and checking
  its OCI image manifest (pure).
- :mod:`installer.oci.credentials` — where credentials come from (flags, ``~/.docker/config.json``)
  and the ``WWW-Authenticate`` challenge grammar (pure apart from reading the config file).
- :mod:`installer.oci.client` — the one module that speaks HTTP to registries: TLS, auth (basic,
  bearer tokens), redirects, retries, streaming blobs with their digests checked.
- :mod:`installer.oci.transfer` — push a bundle's files, pull them back into a private directory.

Trust never comes from the registry: every blob is checked against the digest and size its
manifest names while it streams, and the bundle is then verified with the operator key exactly as
a bundle file is.
"""

from __future__ import annotations

SCHEME = "oci://"


def is_oci_reference(text: str) -> bool:
    """True when ``text`` names a registry artifact (``oci://…``) rather than a bundle file."""
    return text.startswith(SCHEME)
