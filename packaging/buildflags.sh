#!/bin/sh
# Prints the go build flags (besides -trimpath and -ldflags) of a shipped
# binary, so make, packaging/release.sh, the VM tests, the e2e tests, the
# Yocto recipe and the Buildroot package build the same bytes.
# Usage: packaging/buildflags.sh CMD [TAG...]   (extra tags join the binary's)
#
# podvisor and podvisor-shim (the process-pod image, ≤ 18 MiB on arm64;
# docs/footprint.md, "Binary size per device image", has the measurements):
# - nethttpomithttp2: net/http without its HTTP/2 client and server
#   (0.5 MiB). podvisor's HTTP is HTTP/1.1 (probes, as the kubelet's; the API
#   on a Unix socket); gRPC probes speak HTTP/2 themselves (probes/h2c.go).
# - no inlining (-l) where speed does not matter on a device: the other
#   modules (k8s.io types, YAML, eBPF, D-Bus, MQTT, podvisor's own control
#   code) but modernc.org's SQLite, net/..., TLS's protocol code and the
#   crypto API wrappers (not the cryptography), fmt, logging, os, text,
#   regexps... (0.95 MiB). The standard library's hot packages keep theirs:
#   turning inlining off everywhere costs SQLite 5x.
# podvisor-containerd: grpcnotrace, gRPC without golang.org/x/net/trace and
# its html/template (tracing is never enabled here): 0.31 MiB on arm64.
set -eu
cmd=${1:?usage: buildflags.sh CMD [TAG...]}
shift
tags=$*
gcflags=
case $cmd in
podvisor | podvisor-shim)
	tags="nethttpomithttp2 $tags"
	for p in github.com/... k8s.io/... sigs.k8s.io/... go.yaml.in/... golang.org/x/... gopkg.in/... \
		net/... crypto/tls crypto/x509 crypto/ecdsa crypto/rsa crypto/elliptic crypto/ed25519 crypto/ecdh \
		fmt log/... runtime/pprof database/sql/... mime/... debug/... compress/... go/... internal/zstd \
		encoding/asn1 encoding/pem encoding/hex encoding/base64 encoding/xml encoding/csv math/big \
		text/... regexp/... flag os/... path/... hash/... container/... html/... archive/... vendor/...; do
		gcflags="$gcflags -gcflags=$p=-l"
	done
	;;
podvisor-containerd) tags="grpcnotrace $tags" ;;
podhub) ;;
*) echo "buildflags.sh: unknown binary $cmd (podvisor, podvisor-shim, podvisor-containerd, podhub)" >&2; exit 2 ;;
esac
tags=$(echo $tags | tr ' ' ',')
echo ${tags:+-tags=$tags}$gcflags
