#!/bin/sh
# Take the node tool out of a gpu-airgap bundle and check it against the operator key with the
# controller's own tar, gpg, gpgv, grep and sha256sum, before anything runs it (the role's node_tool.yml).
# Usage: sh verify-node-tool.sh BUNDLE OPERATOR_KEY DEST_DIR [FINGERPRINT]
# FINGERPRINT (gpu_airgap_fingerprint, 40 hex digits): only that key of OPERATOR_KEY counts; empty,
# any key of the file. On success DEST_DIR/gpu-airgap-node.pyz is the checked tool; on any failure,
# one sentence on stderr, exit 3 (2 for a malformed FINGERPRINT), and nothing new in DEST_DIR.
set -eu
bundle=$1 key=$2 dest=$3 fingerprint=${4:-}
case $bundle in /*) ;; *) bundle=$PWD/$bundle ;; esac
case $key in /*) ;; *) key=$PWD/$key ;; esac
fail() {
  echo "$*" >&2
  exit 3
}
pin=$(printf '%s' "$fingerprint" | tr -d ' ' | tr abcdefx ABCDEFX)
pin=${pin#0X}
case $pin in *[!0-9A-F]*) pin=bad ;; esac
if [ -n "$fingerprint" ] && [ ${#pin} -ne 40 ]; then
  echo "gpu_airgap_fingerprint '$fingerprint' is not a full 40-hex-digit fingerprint (a key id can be forged); gpg --show-keys --with-fingerprint $key shows it" >&2
  exit 2
fi
[ -f "$bundle" ] || fail "the bundle $bundle does not exist on the controller"
[ -f "$key" ] || fail "the operator key $key does not exist on the controller"
mkdir -p "$dest"
work=$(mktemp -d "$dest/.verify.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
tar --occurrence -xf "$bundle" NODE-SHA256SUMS NODE-SHA256SUMS.asc install.sh gpu-airgap-node.pyz 2>/dev/null \
  || fail "$bundle has no NODE-SHA256SUMS, NODE-SHA256SUMS.asc, install.sh and gpu-airgap-node.pyz to check (not a gpu-airgap bundle, or one built by an older gpu-airgap: rebuild it)"
gpg --batch --quiet --homedir "$work" --dearmor -o operator.gpg "$key" 2>/dev/null \
  || fail "$key is not an OpenPGP public key"
# Decided by gpgv's status lines, not its exit status (2 when a second signature is by a key the file
# lacks: a bundle the old and the new operator key both signed): refused on a bad signature or one by
# an expired or revoked key, good with a SHA-2 signature whose primary key is the pinned one (any key
# of the file when none is). The same texts as the node command's (installer/nodecheck.py).
key_pattern='[0-9A-F]{40}'
[ -z "$pin" ] || key_pattern=$pin
gpgv --homedir "$work" --weak-digest SHA1 --status-fd 1 --keyring ./operator.gpg NODE-SHA256SUMS.asc NODE-SHA256SUMS >gpgv.status 2>/dev/null || :
{ ! grep -Eq '^\[GNUPG:\] (BADSIG|EXPKEYSIG|REVKEYSIG) ' gpgv.status \
  && grep -Eq '^\[GNUPG:\] VALIDSIG ([^ ]+ ){7}(8|9|1[0-24]) [^ ]+ '"$key_pattern"'$' gpgv.status; } \
  || fail "the node tool in $bundle is not signed by the operator key ${pin:+$pin of }$key (NODE-SHA256SUMS.asc); refusing to run it"
sha256sum --quiet -c NODE-SHA256SUMS >/dev/null 2>&1 \
  || fail "the node tool in $bundle does not match its signed NODE-SHA256SUMS; refusing to run it"
mv gpu-airgap-node.pyz "$dest/gpu-airgap-node.pyz"
