#!/bin/sh
# Builds podvisor's packages with nfpm from the binaries `make release` put
# in dist/VERSION/linux-ARCH/: for each architecture a .deb, .rpm, .apk and
# .ipk of podvisor, podvisor-containerd and podhub, into
# dist/VERSION/packages/linux-ARCH/ (a directory per architecture: armv6
# and armv7 are both Debian's armhf, as Raspberry Pi OS names them). nfpm runs through `go run` at a pinned version,
# so it is no requirement of podvisor's module.
# Usage: packaging/packages.sh VERSION [ARCH...]   (ARCH as release.sh's)
set -eu
version=${1:?usage: packages.sh VERSION [ARCH...]}
shift
arches=${*:-amd64 arm64 armv7 armv6 riscv64 386}
out=dist/$version/packages
top=$(pwd)
stage=$(mktemp -d "${TMPDIR:-/tmp}/podvisor-pkg.XXXXXX")
trap 'rm -rf "$stage" "$stage.bin"' EXIT
# nfpm at a pinned version, built once (go install PKG@VERSION builds
# outside this module: nfpm is no requirement of podvisor's go.mod).
if [ -z "${NFPM:-}" ]; then
	GOBIN="$stage.bin" go install github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
	NFPM=$stage.bin/nfpm
fi
mkdir -p "$out"

# Package managers want a version that starts with a digit: v1.2.3 is
# 1.2.3, v1.2.3-4-gabcdef is 1.2.3+git4.gabcdef, and an untagged commit
# (git describe's bare hash) is 0.0.0+gitHASH; -dirty stays as +dirty.
pkgversion() {
	v=${1#v}
	v=$(printf '%s' "$v" | sed -e 's/-dirty$/+dirty/' -e 's/-\([0-9]*\)-g\([0-9a-f]*\)/+git\1.g\2/')
	case $v in
	[0-9]*) printf '%s\n' "$v" ;;
	*) printf '0.0.0+git%s\n' "$v" ;;
	esac
}
VERSION=$(pkgversion "$version")
export VERSION

for arch in $arches; do
	case $arch in
	armv7) ARCH=arm7 ;;
	armv6) ARCH=arm6 ;;
	amd64 | arm64 | riscv64 | 386) ARCH=$arch ;;
	*) echo "packages.sh: unknown architecture $arch" >&2; exit 2 ;;
	esac
	dist=$top/dist/$version/linux-$arch
	[ -x "$dist/podvisor" ] || { echo "packages.sh: no $dist/podvisor: run make release first" >&2; exit 2; }
	export ARCH
	mkdir -p "$out/linux-$arch"
	# nfpm expands variables in a few fields only, not in contents' src:
	# the YAMLs name bin/, packaging/, third_party/ and the licence files,
	# linked here per architecture. Files are copied: nfpm packs a
	# symbolic link as a link (directories' contents as files).
	rm -rf "$stage" && mkdir -p "$stage"
	ln -s "$dist" "$stage/bin" && ln -s "$top/packaging" "$stage/packaging"
	ln -s "$top/third_party" "$stage/third_party"
	cp "$top/LICENSE" "$top/NOTICE" "$stage/"
	for pkg in podvisor podvisor-containerd podhub; do
		for fmt in deb rpm apk ipk; do
			(cd "$stage" && $NFPM package --config "packaging/nfpm/$pkg.yaml" --packager "$fmt" --target "$top/$out/linux-$arch/") >/dev/null
		done
	done
done
rm -rf "$stage"
ls -lR "$out"
