#!/bin/sh
# Builds kubectl from the Go module proxy (k8s.io/kubectl, the library
# the real kubectl's main calls) into a cache, and prints its path.
# A throwaway module outside the repository holds it: kubectl's
# dependencies never reach podvisor's go.mod. Cached per version, so a
# second run only prints the path.
#
#   test/kubectl/build.sh            # builds (or finds) kubectl v1.37.2
#   KUBECTL_VERSION=0.36.6 test/kubectl/build.sh
set -eu
version=${KUBECTL_VERSION:-0.37.2}
cache=${PODVISOR_KUBECTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podvisor-kubectl}
out=$cache/kubectl-v1.${version#0.}
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
cat >"$src/main.go" <<'GO'
// kubectl as cmd/kubectl/kubectl.go in kubernetes/kubernetes builds it.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
GO
cat >"$src/go.mod" <<GO
module podvisor.test/kubectl

go 1.26
GO
cd "$src"
# Outside the repository: no GOFLAGS, GOWORK or vendoring of podvisor's.
export GOWORK=off GOFLAGS=-mod=mod
go get "k8s.io/kubectl@v$version" "k8s.io/component-base@v$version" >&2
go mod tidy >&2
v=v1.${version#0.}
go build -trimpath -o "$out.tmp" -ldflags "-s -w \
	-X k8s.io/component-base/version.gitVersion=$v \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(echo "$version" | cut -d. -f2) \
	-X k8s.io/client-go/pkg/version.gitVersion=$v" . >&2
mv "$out.tmp" "$out"
rm -rf "$src"
echo "$out"
