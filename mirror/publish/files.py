"""The text files of a published mirror: NVIDIA's ``.list`` / ``.repo`` shapes pointed at the internal
URL, ``INSTALL.md`` and ``nginx.conf.example``. Pure functions of their arguments, no I/O.

The shapes follow upstream (``stable/deb/nvidia-container-toolkit.list``,
``stable/rpm/nvidia-container-toolkit.repo``, their experimental twins), with two changes nodes
need: the apt line carries ``signed-by=`` (what NVIDIA's install docs add with sed), and the
``.repo``'s ``gpgkey``/``baseurl`` name the internal server. ``sslverify``/``sslcacert`` are only
written for an https URL: for plain http there is no TLS to verify, and trust comes from
``repo_gpgcheck=1`` alone (as it does for apt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

DEFAULT_KEYRING_NAME: Final = "nvidia-container-toolkit-keyring"
LIST_NAME: Final = "nvidia-container-toolkit.list"
REPO_NAME: Final = "nvidia-container-toolkit.repo"
PREF_NAME: Final = "nvidia-container-toolkit.pref"
#: The toolkit's packages as apt preferences and dnf's excludepkgs= name them (globs).
TOOLKIT_GLOBS: Final = "nvidia-container-toolkit* libnvidia-container*"
#: apt: above any repository's 500 and CUDA's pin (600), below 1000 so a newer installed version is
#: never downgraded silently (apt_preferences(5): 990 <= P < 1000 wins unless the installed one is newer).
APT_PIN_PRIORITY: Final = 990
#: dnf: lower wins; the default is 99, so every repository left at it loses the toolkit to ours.
DNF_PRIORITY: Final = 10
KEY_NAME: Final = "gpgkey"
_KEYRING_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True)
class Site:
    """What the text files describe: where the tree is served and which channels it holds."""

    base_url: str  #: no trailing slash, e.g. ``http://mirror.internal/nvct``
    keyring_name: str  #: ``/usr/share/keyrings/<name>.gpg`` on the nodes
    deb_channels: tuple[str, ...]  #: channels with at least one apt repo, e.g. ("stable",)
    rpm_channels: tuple[str, ...]

    @property
    def keyring_path(self) -> str:
        """Where nodes keep the dearmored key."""
        return f"/usr/share/keyrings/{self.keyring_name}.gpg"


def valid_keyring_name(name: str) -> bool:
    """True for a plain file name stem (no slashes, no leading dot) usable under /usr/share/keyrings."""
    return bool(_KEYRING_NAME_RE.match(name))


def render_list(site: Site, channel: str) -> str:
    """``<channel>/deb/nvidia-container-toolkit.list``: stable adds experimental commented out, when held."""
    line = f"deb [signed-by={site.keyring_path}] {site.base_url}/{{}}/deb/$(ARCH) /\n"
    text = line.format(channel)
    if channel == "stable" and "experimental" in site.deb_channels:
        text += "#" + line.format("experimental")
    return text


def _repo_section(site: Site, section: str, channel: str, enabled: bool) -> str:
    lines = [
        f"[{section}]",
        f"name={section}",
        f"baseurl={site.base_url}/{channel}/rpm/$basearch",
        "repo_gpgcheck=1",
        "gpgcheck=0",
        f"enabled={int(enabled)}",
        f"gpgkey={site.base_url}/{KEY_NAME}",
        # ours wins over CUDA, DGX or distribution repositories that carry the toolkit too (dnf 4 and 5)
        f"priority={DNF_PRIORITY}",
    ]
    if site.base_url.startswith("https://"):
        lines += ["sslverify=1", "sslcacert=/etc/pki/tls/certs/ca-bundle.crt"]
    return "\n".join(lines) + "\n"


def origin_host(base_url: str) -> str:
    """The host apt matches ``Pin: origin`` against: the URL's host name alone (apt drops user and port)."""
    host = base_url.split("://", 1)[-1].split("/", 1)[0].rpartition("@")[2]
    if host.startswith("["):  # an IPv6 literal keeps its colons
        return host.partition("]")[0] + "]"
    return host.partition(":")[0]


def render_pref(site: Site) -> str:
    """``<channel>/deb/nvidia-container-toolkit.pref``: an apt_preferences(5) pin that makes this mirror's
    toolkit win over any other repository offering it (CUDA's network repository, DGX OS, the distribution).

    It pins by origin (the server's host), which holds for re-signed and upstream-signed trees alike.
    """
    return (
        "Explanation: the NVIDIA Container Toolkit comes from the internal mirror, "
        "not from CUDA, DGX or distribution repositories\n"
        f"Package: {TOOLKIT_GLOBS}\n"
        f"Pin: origin {origin_host(site.base_url)}\n"
        f"Pin-Priority: {APT_PIN_PRIORITY}\n"
    )


def render_repo(site: Site, channel: str) -> str:
    """``<channel>/rpm/nvidia-container-toolkit.repo`` in NVIDIA's shape (experimental disabled in stable's)."""
    if channel == "experimental":
        return (
            _repo_section(site, "nvidia-container-toolkit-experimental", "experimental", True)
            + "\n"
            + _repo_section(site, "libnvidia-container-experimental", "experimental", True)
        )
    text = _repo_section(site, "nvidia-container-toolkit", channel, True)
    if "experimental" in site.rpm_channels:
        text += "\n" + _repo_section(site, "nvidia-container-toolkit-experimental", "experimental", False)
    return text


def render_install(site: Site, *, signer: str, preserved: bool) -> str:
    """``INSTALL.md``: the three commands a node runs (key, source, update), per package manager."""
    who = "NVIDIA's key, as the mirror verified it" if preserved else "the mirror operator's key"
    channel = "stable" if ("stable" in site.deb_channels or "stable" in site.rpm_channels) else "experimental"
    parts = [
        "# Using this mirror\n\n",
        f"Served at {site.base_url}. Indexes are signed by {who} ({signer}), published as\n"
        f"`{site.base_url}/{KEY_NAME}`; check its fingerprint out of band before trusting it.\n",
    ]
    if site.deb_channels:
        deb = "stable" if "stable" in site.deb_channels else site.deb_channels[0]
        parts.append(
            "\n## apt (Debian, Ubuntu)\n\n"
            f"    curl -fsSL {site.base_url}/{KEY_NAME} | sudo gpg --batch --yes --dearmor -o {site.keyring_path}\n"
            f"    sudo curl -fsSL {site.base_url}/{deb}/deb/{LIST_NAME} -o /etc/apt/sources.list.d/{LIST_NAME}\n"
            f"    sudo curl -fsSL {site.base_url}/{deb}/deb/{PREF_NAME} -o /etc/apt/preferences.d/{PREF_NAME}\n"
            "    sudo apt-get update\n"
            f"\nThe `.pref` file pins the toolkit to this mirror (Pin-Priority {APT_PIN_PRIORITY}), so an\n"
            "`apt-get upgrade` does not take it from NVIDIA's CUDA or DGX repositories or the distribution\n"
            "instead; `apt-cache policy nvidia-container-toolkit` shows the candidate and where it comes from.\n"
            "\nthen, for example:\n\n"
            "    sudo apt-get install -y nvidia-container-toolkit\n"
        )
    if site.rpm_channels:
        rpm = "stable" if "stable" in site.rpm_channels else site.rpm_channels[0]
        parts.append(
            "\n## dnf / yum (RHEL, Fedora, Amazon Linux)\n\n"
            f"    curl -fsSL {site.base_url}/{KEY_NAME} | gpg --show-keys     # compare the fingerprint\n"
            f"    sudo curl -fsSL {site.base_url}/{rpm}/rpm/{REPO_NAME} -o /etc/yum.repos.d/{REPO_NAME}\n"
            "    sudo dnf -y makecache\n"
            "\nthen, for example:\n\n"
            "    sudo dnf install -y nvidia-container-toolkit\n"
            f"\nThe `.repo` sets `priority={DNF_PRIORITY}` (lower wins; the default is 99), so dnf takes the toolkit from\n"
            "this mirror even where NVIDIA's CUDA repository (`cuda-rhel9.repo`) offers a newer one. On yum\n"
            "without the priorities plugin, exclude the toolkit from the other repository instead, e.g.\n"
            f"`sudo dnf config-manager --save --setopt=cuda-rhel9-x86_64.excludepkgs='{TOOLKIT_GLOBS}'`.\n"
            "\n(With `repo_gpgcheck=1` dnf fetches the `gpgkey` URL itself and imports that key into the\n"
            "repository's own keyring; `-y` accepts it, so check the fingerprint first.)\n"
        )
    if channel == "stable" and ("experimental" in site.deb_channels or "experimental" in site.rpm_channels):
        parts.append(
            "\nRelease candidates (not for production): `sudo sed -i -e '/experimental/ s/^#//g' "
            f"/etc/apt/sources.list.d/{LIST_NAME}` or `sudo dnf config-manager --enable nvidia-container-toolkit-experimental`.\n"
        )
    return "".join(parts)


def render_nginx(site: Site, root: str) -> str:
    """``nginx.conf.example``: a server block serving the tree at ``root`` under the URL's path.

    nginx sends Last-Modified and ETag, which is all apt and dnf need to revalidate the indexes.
    """
    host_and_path = site.base_url.split("://", 1)[-1]
    host, _, path = host_and_path.partition("/")
    prefix = "/" + path.strip("/") + "/" if path.strip("/") else "/"
    return (
        "# A server block for this tree: put it in nginx's http {} block (conf.d/) and adjust listen/TLS.\n"
        "# A publish swaps the whole directory in one rename, so nginx never needs a reload after one.\n"
        "server {\n"
        "    listen 80;\n"
        f"    server_name {host.rsplit(':', 1)[0] if ':' in host and not host.endswith(']') else host};\n"
        f"    location {prefix} {{\n"
        f"        alias {root.rstrip('/')}/;\n"
        "        autoindex on;\n"
        "    }\n"
        "    location ~ /\\. { deny all; }  # the publish marker and anything hidden\n"
        "    types { application/vnd.debian.binary-package deb; application/x-rpm rpm; text/plain list repo pref md asc; }\n"
        "    default_type application/octet-stream;\n"
        "}\n"
    )
