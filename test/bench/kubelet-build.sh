#!/bin/sh
# Builds the upstream kubelet from the Go module proxy, as the same-machine
# peer of the containerd latency bench (go run ./test/bench -kubelet PATH).
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
# with ./staging paths that a dependent module cannot see, so a wrapper
# module replaces each with its published v0.N.x tag.
# Usage: kubelet-build.sh [DIR [VERSION]]  (defaults: /tmp/kubelet-build v1.34.4)
set -eu
dir=${1:-/tmp/kubelet-build}
ver=${2:-v1.34.4}
staging_ver=v0.${ver#v1.}
mkdir -p "$dir"
cd "$dir"
go mod download k8s.io/kubernetes@"$ver"
kmod=$(go mod download -json k8s.io/kubernetes@"$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
{
	echo "module kubeletbuild"
	echo
	echo "go 1.24.0"
	echo
	echo "require k8s.io/kubernetes $ver"
	echo
	echo "replace ("
	sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\t\1 => \1 '"$staging_ver"'#p' "$kmod"
	echo ")"
} >go.mod
cat >tools.go <<'GO'
//go:build tools

package kubeletbuild

import _ "k8s.io/kubernetes/cmd/kubelet"
GO
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
minor=${ver#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
	-ldflags "-X $pkg.gitVersion=$ver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
	-o kubelet k8s.io/kubernetes/cmd/kubelet
echo "$dir/kubelet"
