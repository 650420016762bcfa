#!/bin/sh
# gpu-airgap node installer: check prerequisites, then run the bundled node tool.
# Usage: sh install.sh BUNDLE --keyring OPERATOR_KEY [install options...]
# Extract this script and the tool first:  tar -xf BUNDLE install.sh gpu-airgap-node.pyz
set -eu
here=$(cd "$(dirname "$0")" && pwd)
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
if ! python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)'; then
  echo "install.sh: python3 is $(python3 -V 2>&1 | cut -d' ' -f2); gpu-airgap needs python3 >= 3.9" >&2
  exit 7
fi
if ! command -v gpg >/dev/null 2>&1; then
  echo "install.sh: gpg is required to verify the bundle signature; install gnupg from the OS media" >&2
  exit 7
fi
if [ ! -f "$here/gpu-airgap-node.pyz" ]; then
  echo "install.sh: $here/gpu-airgap-node.pyz is missing; extract it next to this script with: tar -xf BUNDLE install.sh gpu-airgap-node.pyz" >&2
  exit 7
fi
# zstd bundles (the default) need the zstd command on a node: say so before anything runs.
magic=$(od -An -tx1 -N4 "$BUNDLE" 2>/dev/null | tr -d ' \n') || magic=
if [ "$magic" = "28b52ffd" ] && ! command -v zstd >/dev/null 2>&1; then
  echo "install.sh: $BUNDLE is zstd-compressed and this node has no zstd command; install zstd from the OS media or ask for a bundle built with --compression xz" >&2
  exit 7
fi
exec python3 -I "$here/gpu-airgap-node.pyz" install "$BUNDLE" "$@"
