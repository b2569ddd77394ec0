#!/bin/sh
# Builds k9s from the Go module proxy (github.com/derailed/k9s, its own
# main package) into a cache, and prints its path. A throwaway module
# outside the repository holds it: k9s's dependencies never reach
# podvisor's go.mod. Cached per version, so a second run only prints the
# path. A cold build takes minutes and about 2.5 GB of memory at its peak.
#
#   test/kubectl/k9s.sh               # builds (or finds) k9s v0.50.16
#   K9S_VERSION=0.50.15 test/kubectl/k9s.sh
set -eu
version=${K9S_VERSION:-0.50.16}
cache=${PODVISOR_K9S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podvisor-k9s}
out=$cache/k9s-v$version
# One build at a time: CI starts one in the background while the tests,
# which call this script too, may get there first.
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9
if [ -x "$out" ]; then
	echo "$out"
	exit 0
fi
src=$cache/src-$version
rm -rf "$src"
mkdir -p "$src"
cat >"$src/go.mod" <<GO
module podvisor.test/k9s

go 1.26
GO
cd "$src"
# Outside the repository: no GOFLAGS, GOWORK or vendoring of podvisor's.
export GOWORK=off GOFLAGS=-mod=mod
# A module that requires k9s builds its main package: the same as
# "go install github.com/derailed/k9s@v$version", into the cache.
go get "github.com/derailed/k9s@v$version" >&2
go build -trimpath -o "$out.tmp" -ldflags "-s -w \
	-X github.com/derailed/k9s/cmd.version=v$version \
	-X github.com/derailed/k9s/cmd.commit=modproxy" github.com/derailed/k9s >&2
mv "$out.tmp" "$out"
rm -rf "$src"
echo "$out"
