#!/bin/sh
# Fetches Debian's kubernetes-client (kubectl 1.20) with apt and unpacks it
# into a cache, and prints the kubectl's path. Unpacked, not installed: a
# machine may already have another package's /usr/bin/kubectl (Google's
# kubectl package conflicts with it), and the tests want both.
set -eu
cache=${PODVISOR_KUBECTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podvisor-kubectl}
out=$cache/debian/usr/bin/kubectl
if [ -x "$out" ]; then
	echo "$out"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -qq kubernetes-client >&2)
rm -rf "$cache/debian"
mkdir -p "$cache/debian"
dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$cache/debian"
echo "$out"
