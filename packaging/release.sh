#!/bin/sh
# Builds podvisor's static binaries for every architecture a device may
# have, into dist/VERSION/linux-ARCH/, with SHA-256 sums, an SPDX SBOM per
# architecture, and the size report per device image:
#   process pods only:  podvisor + podvisor-shim
#   containerd pods:    the above + podvisor-containerd
# Usage: packaging/release.sh VERSION [ARCH...]   (ARCH as amd64, arm64,
# armv7, armv6, riscv64, 386; all when none is given)
set -eu
version=${1:?usage: release.sh VERSION [ARCH...]}
shift
arches=${*:-amd64 arm64 armv7 armv6 riscv64 386}
out=dist/$version
export CGO_ENABLED=0
# A release rebuilt from the same commit is the same bytes.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
ldflags="-s -w -buildid= -X main.version=$version"
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
budgets=
# budget NAME BYTES MIB notes a binary's size against its target.
budget() {
	verdict="within"
	[ "$2" -le $(($3 * 1048576)) ] || verdict="OVER"
	budgets="$budgets  $1 $(mib "$2") MiB: $verdict the $3 MiB target
"
}

report=$out/SIZES.txt
mkdir -p "$out"
printf '%-8s %12s %12s %12s %12s %12s\n' ARCH podvisor shim containerd "process-img" "ctrd-img" > "$report.new"
for arch in $arches; do
	case $arch in
	armv7) goarch=arm goarm=7 ;;
	armv6) goarch=arm goarm=6 ;;
	amd64 | arm64 | riscv64 | 386) goarch=$arch goarm= ;;
	*) echo "release.sh: unknown architecture $arch (amd64 arm64 armv7 armv6 riscv64 386)" >&2; exit 2 ;;
	esac
	dir=$out/linux-$arch
	mkdir -p "$dir"
	for cmd in podvisor podvisor-shim podvisor-containerd podhub; do
		# shellcheck disable=SC2046 # the flags are words without spaces
		GOOS=linux GOARCH=$goarch GOARM=$goarm go build -trimpath $(packaging/buildflags.sh "$cmd") -ldflags "$ldflags" -o "$dir/$cmd" "./cmd/$cmd"
	done
	go run ./packaging/sbom "$dir"/podvisor "$dir"/podvisor-shim "$dir"/podvisor-containerd "$dir"/podhub > "$dir/sbom.spdx.json"
	(cd "$dir" && sha256sum podvisor podvisor-shim podvisor-containerd podhub sbom.spdx.json > SHA256SUMS)
	# The licences go with the binaries: podvisor's, and the MIT broker's
	# that podhub links.
	cp LICENSE NOTICE "$dir/" && cp third_party/mochi-mqtt-server/LICENSE.md "$dir/LICENSE.mochi-mqtt-server"
	pv=$(stat -c %s "$dir/podvisor"); sh=$(stat -c %s "$dir/podvisor-shim"); ct=$(stat -c %s "$dir/podvisor-containerd")
	printf '%-8s %12s %12s %12s %12s %12s\n' "$arch" "$(mib "$pv")" "$(mib "$sh")" "$(mib "$ct")" \
		"$(mib $((pv + sh)))" "$(mib $((pv + sh + ct)))" >> "$report.new"
	# The budgets: podvisor ≤ 18 MiB on arm64, podvisor-containerd ≤ 20 MiB.
	[ "$arch" = arm64 ] && budget "podvisor (arm64)" "$pv" 18
	budget "podvisor-containerd ($arch)" "$ct" 20
done
echo "(MiB, stripped; process-img = podvisor + podvisor-shim; ctrd-img adds podvisor-containerd)" >> "$report.new"
[ -z "$budgets" ] || printf 'targets:\n%s' "$budgets" >> "$report.new"
mv "$report.new" "$report"
cat "$report"
