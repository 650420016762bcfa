#!/bin/sh
# Take the node tool out of a gpu-airgap bundle and check it against the operator key with the
# controller's own tar, gpg, gpgv and sha256sum, before anything runs it (the role's node_tool.yml).
# Usage: sh verify-node-tool.sh BUNDLE OPERATOR_KEY DEST_DIR
# On success DEST_DIR/gpu-airgap-node.pyz is the checked tool; on any failure, one sentence on
# stderr, exit 3, and nothing new in DEST_DIR.
set -eu
bundle=$1 key=$2 dest=$3
case $bundle in /*) ;; *) bundle=$PWD/$bundle ;; esac
case $key in /*) ;; *) key=$PWD/$key ;; esac
fail() {
  echo "$*" >&2
  exit 3
}
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
gpgv --homedir "$work" --keyring ./operator.gpg NODE-SHA256SUMS.asc NODE-SHA256SUMS >/dev/null 2>&1 \
  || fail "the node tool in $bundle is not signed by the operator key $key (NODE-SHA256SUMS.asc); refusing to run it"
sha256sum --quiet -c NODE-SHA256SUMS >/dev/null 2>&1 \
  || fail "the node tool in $bundle does not match its signed NODE-SHA256SUMS; refusing to run it"
mv gpu-airgap-node.pyz "$dest/gpu-airgap-node.pyz"
