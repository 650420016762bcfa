#!/bin/sh
# gpu-airgap node installer: check prerequisites and the node tool's signed checksum, then run the tool.
# Usage: sh install.sh BUNDLE --keyring OPERATOR_KEY [install options...]
#
# Never run this script before checking it: copy it out of the bundle, together with the node tool,
# their signed checksum list and the operator key, into a private directory, check the copies with
# the node's own tools against the operator key and run only the copies: the command
# `gpu-airgap bundle build` prints (README "Install from the bundle"; docs/signing.md).
# Before it runs the tool, this script repeats that check against the key given with --keyring (only
# the key --fingerprint names, when given), on private copies again. That catches a skipped step; it
# is no substitute for it (a modified install.sh would not check anything).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
verify_first='take them out into a private directory and check them there first, with the command `gpu-airgap bundle build` printed (README "Install from the bundle")'
if [ $# -lt 1 ]; then
  echo "usage: $0 BUNDLE --keyring OPERATOR_KEY [install options...]" >&2
  exit 2
fi
BUNDLE=$1
shift
if ! command -v python3 >/dev/null 2>&1; then
  echo "install.sh: python3 (>= 3.9) is required on the node; install it from the OS media" >&2
  exit 7
fi
if ! python3 -I -S -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)'; then
  echo "install.sh: python3 is $(python3 -V 2>&1 | cut -d' ' -f2); gpu-airgap needs python3 >= 3.9" >&2
  exit 7
fi
# Debian's python3-minimal alone lacks most of the standard library (shutil, tarfile, email, ...): the
# node tool would die on its first import with a traceback, so name what is missing and the package.
stdlib="base64 binascii codecs collections configparser contextlib copy dataclasses datetime difflib email enum errno fcntl fnmatch functools glob gzip hashlib http importlib io ipaddress json logging lzma os pathlib platform posixpath pwd re secrets shlex shutil socket ssl stat struct subprocess sys tarfile tempfile threading time traceback types typing urllib zipfile zlib"
missing=$(python3 -I -S -c 'import sys
from importlib.util import find_spec
print(" ".join(name for name in sys.argv[1].split() if find_spec(name) is None))' "$stdlib" 2>/dev/null) || missing="importlib"
if [ -n "$missing" ]; then
  echo "install.sh: python3 on this node lacks the standard library modules $missing (python3-minimal alone); install python3 (libpython3-stdlib on Debian and Ubuntu, python3-libs on RHEL) from the OS media" >&2
  exit 7
fi
if ! command -v gpg >/dev/null 2>&1; then
  echo "install.sh: gpg is required to verify the bundle signature; install gnupg from the OS media" >&2
  exit 7
fi
if [ ! -f "$here/gpu-airgap-node.pyz" ]; then
  echo "install.sh: $here/gpu-airgap-node.pyz is missing; $verify_first" >&2
  exit 7
fi
# zstd bundles (the default) need the zstd command on a node: say so before anything runs.
magic=$(od -An -tx1 -N4 "$BUNDLE" 2>/dev/null | tr -d ' \n') || magic=
if [ "$magic" = "28b52ffd" ] && ! command -v zstd >/dev/null 2>&1; then
  echo "install.sh: $BUNDLE is zstd-compressed and this node has no zstd command; install zstd from the OS media or ask for a bundle built with --compression xz" >&2
  exit 7
fi

# The node tool runs only when NODE-SHA256SUMS carries a good signature by the --keyring key (the
# one --fingerprint pins, when given) and lists its sha256 (gpgv reads binary keyrings only, hence
# the dearmor into a private directory).
keyring=
fingerprint=
previous=
for arg in "$@"; do
  case $previous in --keyring) keyring=$arg ;; --fingerprint) fingerprint=$arg ;; esac
  case $arg in --keyring=*) keyring=${arg#--keyring=} ;; --fingerprint=*) fingerprint=${arg#--fingerprint=} ;; esac
  previous=$arg
done
if [ -z "$keyring" ] || [ ! -f "$keyring" ]; then
  echo "install.sh: give the operator's public key file with --keyring OPERATOR_KEY${keyring:+ ($keyring is not a file)}" >&2
  exit 2
fi
# --fingerprint as the node tool reads it: spaces and a 0x allowed, any case; 40 hex digits, never a key id
pin=$(printf '%s' "$fingerprint" | tr -d ' ' | tr abcdefx ABCDEFX)
pin=${pin#0X}
case $pin in *[!0-9A-F]*) pin=bad ;; esac
if [ -n "$fingerprint" ] && [ ${#pin} -ne 40 ]; then
  echo "install.sh: --fingerprint '$fingerprint' is not a full 40-hex-digit fingerprint (a key id can be forged); gpg --show-keys --with-fingerprint $keyring shows it" >&2
  exit 2
fi
if [ ! -f "$here/NODE-SHA256SUMS" ] || [ ! -f "$here/NODE-SHA256SUMS.asc" ]; then
  echo "install.sh: NODE-SHA256SUMS and its signature are not next to this script; $verify_first" >&2
  exit 3
fi
# $here may be writable by others (a user-mounted USB disk, a shared upload folder), who could swap
# a file there between its check and its run: copy first, then check and run only the copies, in a
# directory only we can write (mktemp -d: 0700, ours, in the sticky /tmp whatever TMPDIR says, so
# nobody else can rename it away and put their own in its place), with the copy of the key that
# checked them.
private=$(mktemp -d /tmp/gpu-airgap-install.XXXXXX)
trap 'rm -rf "$private"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if ! cp "$here/NODE-SHA256SUMS" "$here/NODE-SHA256SUMS.asc" "$here/install.sh" "$here/gpu-airgap-node.pyz" "$private/" 2>/dev/null \
  || ! cp "$keyring" "$private/operator.key" 2>/dev/null; then
  echo "install.sh: could not copy the node files next to this script and $keyring into a private directory ($private); refusing to run the node tool" >&2
  exit 3
fi
# Decided by gpgv's status lines, not its exit status, which is 2 when a second signature is by a key
# this node lacks (a bundle the old and the new operator key both signed, during a key rotation):
# refused on any bad signature or one by an expired or revoked key, good with a signature made with
# a SHA-2 digest whose primary key is the pinned one (any key of the file without --fingerprint).
# The same texts as the node command's (installer/nodecheck.py).
key_pattern='[0-9A-F]{40}'
[ -z "$pin" ] || key_pattern=$pin
signed_by_operator() { # STATUS_FILE
  ! grep -Eq '^\[GNUPG:\] (BADSIG|EXPKEYSIG|REVKEYSIG) ' "$1" \
    && grep -Eq '^\[GNUPG:\] VALIDSIG ([^ ]+ ){7}(8|9|1[0-24]) [^ ]+ '"$key_pattern"'$' "$1"
}
verified=no
if gpg --batch --quiet --homedir "$private" --dearmor -o "$private/operator.gpg" "$private/operator.key" 2>/dev/null; then
  if command -v gpgv >/dev/null 2>&1; then
    gpgv --homedir "$private" --weak-digest SHA1 --status-fd 1 --keyring "$private/operator.gpg" \
      "$private/NODE-SHA256SUMS.asc" "$private/NODE-SHA256SUMS" >"$private/gpgv.status" 2>/dev/null || :
  else
    gpg --batch --homedir "$private" --no-default-keyring --keyring "$private/operator.gpg" --weak-digest SHA1 \
      --status-fd 1 --verify "$private/NODE-SHA256SUMS.asc" "$private/NODE-SHA256SUMS" >"$private/gpgv.status" 2>/dev/null || :
  fi
  signed_by_operator "$private/gpgv.status" && verified=yes
fi
if [ "$verified" != yes ]; then
  echo "install.sh: NODE-SHA256SUMS next to this script is not signed by the key ${pin:+$pin }in $keyring; refusing to run the node tool" >&2
  exit 3
fi
if ! (cd "$private" && sha256sum --quiet -c NODE-SHA256SUMS >/dev/null 2>&1); then
  echo "install.sh: install.sh or gpu-airgap-node.pyz does not match the signed NODE-SHA256SUMS; refusing to run the node tool" >&2
  exit 3
fi
# The tool reads the key again to verify the bundle: give it the copy that checked the tool.
previous=
for arg do
  shift
  case $previous in --keyring) arg=$private/operator.key ;; esac
  previous=$arg
  case $arg in --keyring=*) arg=--keyring=$private/operator.key ;; esac
  set -- "$@" "$arg"
done
status=0
python3 -I -S "$private/gpu-airgap-node.pyz" install "$BUNDLE" "$@" || status=$?
exit "$status"
