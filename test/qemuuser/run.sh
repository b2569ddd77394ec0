#!/usr/bin/env bash
# Runs the unit tests of podvisor's pure packages (the core, its deciders
# and decoders, the vocabulary, the hub protocol, the config schema) on
# other architectures under qemu-user: arm64, armv7 (32-bit: int is 32
# bits there) and riscv64. Test binaries are built static (CGO_ENABLED=0)
# and run by qemu-ARCH-static directly, so binfmt_misc is not needed.
#
#   test/qemuuser/run.sh [ARCH...]    (arm64 armv7 riscv64 by default)
set -uo pipefail
cd "$(dirname "$0")/../.."
arches=${*:-arm64 armv7 riscv64}
pkgs=(
  ./pod/... ./kernel/ ./config/
  ./supervisor/lifecycle/ ./supervisor/admission/ ./supervisor/eviction/
  ./pod/priority/ ./pod/manifest/ ./supervisor/podsecurity/
  ./sync/protocol/ ./sync/throttle/
)
export CGO_ENABLED=0
work=$(mktemp -d /tmp/podvisor-qemuuser.XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0
for arch in $arches; do
  case $arch in
  arm64) goarch=arm64 goarm= qemu=qemu-aarch64-static ;;
  armv7) goarch=arm goarm=7 qemu=qemu-arm-static ;;
  armv6) goarch=arm goarm=6 qemu=qemu-arm-static ;;
  riscv64) goarch=riscv64 goarm= qemu=qemu-riscv64-static ;;
  *) echo "qemuuser: unknown architecture $arch" >&2; exit 2 ;;
  esac
  command -v "$qemu" >/dev/null || { echo "qemuuser: $qemu missing (apt-get install qemu-user-static)" >&2; exit 1; }
  for p in $(go list "${pkgs[@]}"); do
    name=${p#github.com/podvisor/podvisor/}
    bin="$work/$arch/${name//\//_}.test"
    if ! GOARCH=$goarch GOARM=$goarm go test -c -o "$bin" "$p"; then
      echo "FAIL  $arch $name (does not build)"; status=1; continue
    fi
    [ -f "$bin" ] || continue # a package without tests
    # Tests read testdata relative to their package directory.
    if out=$(cd "$name" && "$qemu" "$bin" -test.count=1 2>&1); then
      echo "ok    $arch $name"
    else
      echo "FAIL  $arch $name"; echo "$out" | tail -30; status=1
    fi
  done
done
exit $status
