# podvisor build, test, demo and benchmarks. Every binary is static
# (CGO_ENABLED=0) and stamped with the version.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
# A shipped binary's other flags (build tags, where inlining is off), the
# same in every build of it: packaging/buildflags.sh says which and why.
buildflags = $(shell packaging/buildflags.sh $(1))
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
export CGO_ENABLED := 0

.PHONY: all build vet-cross release packages test-packages test-readonly-root test test-cgroup2 test-kernel-config test-qemu-user test-systemd test-containerd-v2 unit lint fuzz demo bench bench-hub bench-compare bench-rollout bench-update bench-objects bench-observe bench-scale clean

all: build

# podvisor-shim and podvisor-containerd go beside podvisor: the daemon runs
# a shim per process container and the plugin for containerd pods.
build:
	go build -trimpath $(call buildflags,podvisor) -ldflags "$(LDFLAGS)" -o bin/podvisor ./cmd/podvisor
	go build -trimpath $(call buildflags,podvisor-shim) -ldflags "$(LDFLAGS)" -o bin/podvisor-shim ./cmd/podvisor-shim
	go build -trimpath $(call buildflags,podvisor-containerd) -ldflags "$(LDFLAGS)" -o bin/podvisor-containerd ./cmd/podvisor-containerd
	go build -trimpath $(call buildflags,podhub) -ldflags "$(LDFLAGS)" -o bin/podhub ./cmd/podhub

# Everything CI runs: lint, unit and integration tests (real processes),
# and the fuzz seed corpus (part of go test). leakcheck fails the run when
# the tests left a process, mount, cgroup or network namespace behind.
# Each stage is timed (test/stage.sh) and the times are printed at the end,
# so a CI log says where its minutes went. The Go tests run alone, two
# test processes at a time (a machine busier than that would test the
# runner's load, not podvisor), in two lanes (test/golanes.sh): e2e, by
# far the longest package (16 minutes of tests one at a time, which every
# other package together did not fill beside it), is split in two, its
# fleet tests then conformance in one lane, its node tests then every
# other package one at a time in the other.
# The VM and package stages then run two at a time (TEST_STAGE_JOBS): each
# has its own work dir, VM and logs, and what they share is made once
# before them (the shipped binaries, the test image, the arm64 builds) or
# taken under a lock (the debootstrapped root's cache); each one's output
# is printed whole when it ends (--output-sync), and one failing stage
# does not stop the others (-k), so a CI log shows every failure at once.
# The hub-replica tests run alone, after them, in the stage "replicas":
# the failover test (three NATS nodes, PostgreSQL, three hubs, hundreds of
# simulated devices) fills both cores for a minute or more, which the e2e
# and conformance packages' deadlines for real daemons do not allow, and
# test/replicas times lease takeovers of three hubs to the second, which
# the e2e and conformance packages' load does not allow.
REPLICA_TEST_PKGS = ./test/failover ./test/replicas
GO_TEST_PKGS = $(filter-out %/test/e2e %/test/conformance %/test/failover %/test/replicas,$(shell go list ./...))
TEST_STAGES := packages systemd containerd-v2 arm64-vm readonly-root qemu-user cgroup2 kernel-config size-budget
TEST_STAGE_JOBS ?= 2
test:
	@test/stage.sh --reset
	@test/stage.sh lint $(MAKE) --no-print-directory lint || { test/stage.sh --summary; exit 1; }
	@test/stage.sh build $(MAKE) --no-print-directory build
	@test/stage.sh go-test go run ./test/leakcheck -- test/golanes.sh $(GO_TEST_PKGS) || { test/stage.sh --summary; exit 1; }
	@test/stage.sh mochi-test sh -c 'cd third_party/mochi-mqtt-server && go test -count=1 . ./listeners/ ./packets/' || { test/stage.sh --summary; exit 1; }
	@test/stage.sh replicas go run ./test/leakcheck -- go test -count=1 -p 1 -timeout 20m $(REPLICA_TEST_PKGS) || { test/stage.sh --summary; exit 1; }
	@$(MAKE) --no-print-directory -k -j$(TEST_STAGE_JOBS) --output-sync=target test-stages; rc=$$?; test/stage.sh --summary; exit $$rc

# The stages after the Go tests, each timed; STAGE_DEPS= tells their own
# makes that the shared inputs are already built.
.PHONY: test-stages test-stage-inputs
test-stages: $(addprefix stage-,$(TEST_STAGES))
stage-%: test-stage-inputs
	@test/stage.sh $* $(MAKE) --no-print-directory STAGE_DEPS= ARM64_DEPS= test-$*
test-stage-inputs: build bin/busybox-image.tar arm64-bins

# What the stages share, made once: the test image (systemd and containerd
# VMs) and the arm64 builds (arm64 VM and size budget).
bin/busybox-image.tar: $(wildcard test/ociimage/mkimage/*.go test/ociimage/*.go)
	go run ./test/ociimage/mkimage podvisor.test/busybox:1 $@
.PHONY: arm64-bins
arm64-bins:
	GOARCH=arm64 go build -trimpath $(call buildflags,podvisor) -ldflags "$(LDFLAGS)" -o bin/arm64/podvisor ./cmd/podvisor
	GOARCH=arm64 go build -trimpath $(call buildflags,podvisor-shim) -ldflags "$(LDFLAGS)" -o bin/arm64/podvisor-shim ./cmd/podvisor-shim
	GOARCH=arm64 go build -trimpath $(call buildflags,podvisor-containerd) -ldflags "$(LDFLAGS)" -o bin/arm64/podvisor-containerd ./cmd/podvisor-containerd
	GOARCH=arm64 go build -trimpath -ldflags "-s -w" -o bin/arm64/hog ./test/hog
STAGE_DEPS ?= build
ARM64_DEPS ?= arm64-bins

# The cgroup v2 driver inside a VM whose only hierarchy is cgroup2 with all
# controllers (this project's hosts have v1 controllers). Skipped where
# qemu is missing, except in CI.
test-cgroup2: $(STAGE_DEPS)
	@if ! command -v qemu-system-x86_64 >/dev/null || ! command -v busybox >/dev/null || ! command -v cpio >/dev/null; then \
		if [ "$$CI" = true ]; then echo "CI prerequisite missing: qemu-system-x86, busybox-static, cpio"; exit 1; fi; \
		echo "skipping the cgroup v2 VM test: install qemu-system-x86 busybox-static cpio"; exit 0; fi; \
	set -ex; \
	go test -c -o bin/cgroups.test ./cgroups/; \
	go test -c -o bin/listen.test ./probes/listen/; \
	go test -c -o bin/e2e.test ./test/e2e/; \
	test/vm/cgroup2.sh -f bin/podvisor -f bin/podvisor-shim bin/cgroups.test bin/listen.test \
		'bin/e2e.test=-test.run=^(TestListenDrivenReadiness|TestListenOtherPortDoesNotTrigger|TestListenProbesSurviveKills)$$'

# The pure packages' unit tests on arm64, armv7 and riscv64 under
# qemu-user. Skipped where qemu-user-static is missing, except in CI.
test-qemu-user:
	@if ! command -v qemu-aarch64-static >/dev/null || ! command -v qemu-arm-static >/dev/null || ! command -v qemu-riscv64-static >/dev/null; then \
		if [ "$$CI" = true ]; then echo "CI prerequisite missing: qemu-user-static"; exit 1; fi; \
		echo "skipping the qemu-user tests: install qemu-user-static"; exit 0; fi; \
	set -ex; \
	test/qemuuser/run.sh

# podvisor's process runtime on an emulated arm64 VM (Debian's arm64
# kernel, cgroup v2 only, PSI): a pod with limits, a crash loop with
# backoff, adoption after kill -9 of the daemon, an eviction. About a
# minute. Skipped where qemu-system-arm is missing, except in CI.
.PHONY: test-arm64-vm
test-arm64-vm: $(ARM64_DEPS)
	@if ! command -v qemu-system-aarch64 >/dev/null || ! command -v cpio >/dev/null || ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then \
		if [ "$$CI" = true ]; then echo "CI prerequisite missing: qemu-system-arm, cpio, apt-get, dpkg-deb"; exit 1; fi; \
		echo "skipping the arm64 VM test: install qemu-system-arm cpio"; exit 0; fi; \
	set -ex; \
	test/vm/arm64.sh bin/arm64

# The device image budgets: podvisor ≤ 18 MiB stripped on arm64 (it was 16;
# raised so the next capabilities fit, each reporting what it adds) and
# podvisor-containerd ≤ 20 MiB, built as releases are. Fails when a change
# takes a binary over; `make size` says where the bytes go.
.PHONY: test-size-budget
test-size-budget: $(ARM64_DEPS)
	@set -e; \
	for b in podvisor:18 podvisor-containerd:20; do \
		f=bin/arm64/$${b%%:*}; max=$$(( $${b##*:} * 1048576 )); size=$$(stat -c %s $$f); \
		if [ $$size -gt $$max ]; then echo "size budget: $$f is $$size bytes, over $${b##*:} MiB by $$((size - max)) (make size says where the bytes go)"; exit 1; fi; \
		echo "size budget: $$f $$size bytes, $$((max - size)) under $${b##*:} MiB"; \
	done

# Where each binary's bytes go, by module, for amd64 and arm64: built with
# the release flags but the symbol table kept (the sizes tool reports the
# stripped size). SIZE_BY=package for a finer cut, SIZE_TOP=0 for all rows;
# SIZE_GCFLAGS adds compiler flags after the release ones to try others:
# the last pattern matching a package wins, so SIZE_GCFLAGS=-gcflags=all=
# measures the binaries with inlining everywhere (docs/footprint.md).
.PHONY: size
SIZE_BY ?= module
SIZE_TOP ?= 25
SIZE_GCFLAGS ?=
size:
	@set -e; for arch in amd64 arm64; do for cmd in podvisor podvisor-shim podvisor-containerd; do \
		GOARCH=$$arch go build -trimpath $$(packaging/buildflags.sh $$cmd) $(SIZE_GCFLAGS) -ldflags "-buildid= -X main.version=$(VERSION)" -o bin/size/$$arch/$$cmd ./cmd/$$cmd; \
	done; done; \
	go run ./packaging/sizes -by $(SIZE_BY) -top $(SIZE_TOP) bin/size/amd64/* bin/size/arm64/*

# podvisor check-kernel against the config of Debian's kernel package (the
# one the VM tests boot). Skipped where apt-get cannot fetch it, except in CI.
test-kernel-config: $(STAGE_DEPS)
	@if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then \
		if [ "$$CI" = true ]; then echo "CI prerequisite missing: apt-get, dpkg-deb"; exit 1; fi; \
		echo "skipping the kernel config check: needs apt-get and dpkg-deb"; exit 0; fi; \
	set -ex; \
	test/vm/check-kernel.sh bin/podvisor

# podvisor as the packaged systemd service in a VM running systemd, dbus
# and logind: the systemd cgroup driver for process and containerd pods,
# the watchdog restarting a daemon whose loop is stalled on purpose (the
# test build below), the self-update from podhub in the VM and its
# rollback through the unit, and graceful shutdown through logind.
# Skipped where qemu, debootstrap, containerd or runc is missing, except
# in CI.
test-systemd: $(STAGE_DEPS) bin/busybox-image.tar teststall-bin vmrelease-bins
	@if ! command -v qemu-system-x86_64 >/dev/null || ! command -v debootstrap >/dev/null || ! command -v cpio >/dev/null || ! command -v containerd >/dev/null || ! command -v runc >/dev/null; then \
		if [ "$$CI" = true ]; then echo "CI prerequisite missing: qemu-system-x86, debootstrap, cpio, containerd, runc"; exit 1; fi; \
		echo "skipping the systemd VM test: install qemu-system-x86 debootstrap cpio containerd runc"; exit 0; fi; \
	set -ex; \
	test/vm/systemd.sh bin bin/busybox-image.tar bin/teststall/podvisor bin/vmrelease/v2

# The systemd VM's self-update: its device runs VM_V1 (the test build
# below, which replaces the packaged podvisor there), and podhub rolls out
# VM_V2, this tree's three binaries built as released; a device refuses a
# version that is not above its own (a commit stamp is not semantic).
VM_V1 := v0.26.1
VM_V2 := v0.26.2

# podvisor built as released plus SIGUSR2, which blocks its loop for good
# (supervisor/teststall.go, -tags podvisor_teststall): the systemd VM's
# watchdog check. Never shipped.
.PHONY: teststall-bin
teststall-bin:
	go build -trimpath $(call buildflags,podvisor podvisor_teststall) -ldflags "-s -w -X main.version=$(VM_V1)" -o bin/teststall/podvisor ./cmd/podvisor

.PHONY: vmrelease-bins
vmrelease-bins:
	go build -trimpath $(call buildflags,podvisor) -ldflags "-s -w -X main.version=$(VM_V2)" -o bin/vmrelease/v2/podvisor ./cmd/podvisor
	go build -trimpath $(call buildflags,podvisor-shim) -ldflags "-s -w -X main.version=$(VM_V2)" -o bin/vmrelease/v2/podvisor-shim ./cmd/podvisor-shim
	go build -trimpath $(call buildflags,podvisor-containerd) -ldflags "-s -w -X main.version=$(VM_V2)" -o bin/vmrelease/v2/podvisor-containerd ./cmd/podvisor-containerd

# containerd pods on cgroup v2, in a VM with Debian's containerd and runc.
# Skipped where they or qemu are missing, except in CI.
test-containerd-v2: $(STAGE_DEPS) bin/busybox-image.tar
	@if ! command -v qemu-system-x86_64 >/dev/null || ! command -v containerd >/dev/null || ! command -v runc >/dev/null || ! command -v cpio >/dev/null; then \
		if [ "$$CI" = true ]; then echo "CI prerequisite missing: qemu-system-x86, containerd, runc, cpio"; exit 1; fi; \
		echo "skipping the containerd cgroup v2 VM test: install qemu-system-x86 containerd runc cpio"; exit 0; fi; \
	set -ex; \
	test/vm/containerd.sh bin bin/busybox-image.tar

# Static binaries for every device architecture into dist/VERSION/, with
# SHA-256 sums, an SPDX SBOM per architecture and the size per device image.
release:
	packaging/release.sh $(VERSION) $(ARCHES)

# .deb, .rpm, .apk and .ipk of podvisor, podvisor-containerd and podhub per
# architecture into dist/VERSION/packages/linux-ARCH/ (nfpm, run at a pinned version
# outside podvisor's module). ARCHES="amd64 arm64" limits both targets.
packages: release
	packaging/packages.sh $(VERSION) $(ARCHES)

# The packages: the .deb installed, upgraded with a pod running (same PID
# after) and purged, in a chroot of a Debian root (sysvinit scripts) and in
# the systemd VM; the .apk, .ipk and .rpm metadata. Skipped where
# debootstrap (or, for the VM, qemu and cpio) is missing, except in CI.
test-packages: $(STAGE_DEPS)
	@if ! command -v debootstrap >/dev/null || ! command -v dpkg-deb >/dev/null || ! command -v qemu-system-x86_64 >/dev/null || ! command -v cpio >/dev/null; then \
		if [ "$$CI" = true ]; then echo "CI prerequisite missing: debootstrap, dpkg, qemu-system-x86, cpio"; exit 1; fi; \
		echo "skipping the package tests: install debootstrap qemu-system-x86 cpio"; exit 0; fi; \
	set -ex; \
	test/vm/packages.sh; \
	test/vm/packages-systemd.sh

test-readonly-root: $(STAGE_DEPS)
	@if [ "$$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! command -v strace >/dev/null; then \
		if [ "$$CI" = true ]; then echo "CI prerequisite missing: root, unshare, strace"; exit 1; fi; \
		echo "skipping the read-only root test: needs root, unshare and strace"; exit 0; fi; \
	set -ex; \
	test/vm/readonly-root.sh bin 60

unit:
	go test -count=1 ./supervisor/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	@$(MAKE) --no-print-directory vet-cross
	go run $(STATICCHECK) ./...

# Every architecture a device may have: a type that differs there (Statfs_t's
# int32 Bsize on 32-bit ARM and 386) must not break the build again. armv6
# is left out: GOARM changes the code generated, not the types, the files
# or the build tags vet sees (no file is built for one GOARM only), so its
# pass repeated armv7's; make release and the packages stage build it.
CROSS_ARCHES := arm64 arm/7 riscv64 386
vet-cross:
	@for t in $(CROSS_ARCHES); do arch=$${t%%/*}; arm=$${t#*/}; [ "$$arm" = "$$t" ] && arm=; \
		echo "go vet ./... (GOARCH=$$arch$${arm:+ GOARM=$$arm})"; \
		GOARCH=$$arch GOARM=$$arm go vet ./... || exit 1; done

# Explore the manifest and hub-protocol decoders beyond the seed corpus.
fuzz:
	go test -run '^$$' -fuzz FuzzDecode -fuzztime 60s ./pod/manifest/
	go test -run '^$$' -fuzz FuzzOpenDesired -fuzztime 30s ./sync/protocol/
	go test -run '^$$' -fuzz FuzzDecodeStatusBatch -fuzztime 30s ./sync/protocol/

demo: build
	@examples/demo.sh

bench: build
	go run ./test/bench -bin bin/podvisor -hub-devices 3000 -hub-apply-devices 1000 -sched-devices 10000 -rollout-devices 10000 \
		-observe-pods 50 -observe-devices 1000 -observe-device-pods 10

# Only the DaemonSet rolling update over 10,000 simulated devices.
bench-rollout: build
	go run ./test/bench -bin bin/podvisor -rollout-only -rollout-devices 10000

# A release (this tree stamped v2.0.0) rolled out to 200 simulated
# devices and one real podvisor (this tree stamped v1.0.0, with 11 process
# pods) in waves of 10 %, each moving its artifacts through the broker in
# chunks: wall time, bytes per device, podhub's CPU and RSS, the real
# device's update time, API gap and pod downtime (docs/selfupdate.md).
# Root (the real device's pods); -update-real=false for the simulated only.
bench-update: build
	go run ./test/bench -bin bin/podvisor -update-only -update-devices 200 -update-real

# A ConfigMap applied changed at podhub until every pod of one real
# podvisor (50 process pods mounting it; -objects-runtime containerd for
# busybox containers) and every one of 1,000 simulated devices (real sealing,
# signatures and HPKE) has the new content: p50/p95/max over 10 changes,
# bytes per device, podhub's CPU and RSS (docs/measurements.md). Root.
bench-objects: build
	go run ./test/bench -bin bin/podvisor -objects-only -objects-pods 50 -objects-devices 1000 -objects-changes 10

# What seeing the fleet costs (issue 28): one podvisor with 50 process
# pods, metrics off vs on (daemon + keeper PSS), 50 scrapes of its
# /metrics, the metrics packages' bytes in podvisor arm64; podhub serve
# --http-listen with 1,000 simulated devices running 10 pods each:
# kubectl get pods -A and get nodes (test/kubectl's kubectl, else the
# machine's), 50 scrapes of the hub's /metrics, the dashboard's pods page
# (fetched, and rendered by headless Chromium where /usr/bin/chromium is),
# podhub's RSS with the listener on (docs/measurements.md). Root.
bench-observe: build
	go run ./test/bench -bin bin/podvisor -observe-only -observe-pods 50 -observe-devices 1000 -observe-device-pods 10

# The fleet at scale (issue 29, docs/scale.md): 10,000 simulated devices
# (real agents in child processes) against podhub on SQLite, podhub on
# PostgreSQL (a private server the bench starts from Debian's
# postgresql) and three podhub replicas on that PostgreSQL behind three
# NATS nodes (Debian's nats-server), in one run: every device Ready,
# pod statuses stored per second under an offered load, a DaemonSet
# applied -> every ack stored, the memory of every process and per
# 1,000 devices, and the ratios. About 20 min on 2 cores; CI never runs
# it. SCALE_DEVICES=1000 for a shorter run.
SCALE_DEVICES ?= 10000
bench-scale: build
	go run ./test/bench -bin bin/podvisor -scale-only -scale-devices $(SCALE_DEVICES)

# The rows a reshaping must not regress (latencies, RSS, arm64 size, hub
# status/s and idle cost per device), for BASE and this tree in one run:
# make bench-compare BASE=<commit>.
bench-compare:
	test/bench-compare.sh $(BASE)

# Only the hub sync rows: status throughput, podhub with 3,000 devices
# (1,000 of them take the apply).
bench-hub: build
	go run ./test/bench -bin bin/podvisor -hub-only -hub-devices 3000 -hub-apply-devices 1000

clean:
	rm -rf bin
