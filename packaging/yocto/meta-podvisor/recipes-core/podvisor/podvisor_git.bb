SUMMARY = "podvisor: Kubernetes static pods on small Linux devices"
DESCRIPTION = "A small static daemon that supervises Kubernetes-style static \
pods (process pods and, with podvisor-containerd, containerd pods) with \
cgroup limits, probes and eviction, and syncs from an optional fleet hub."
HOMEPAGE = "https://github.com/podvisor/podvisor"
SECTION = "admin"

# The binaries this recipe builds are podvisor's own code (Apache-2.0):
# the MIT-licensed MQTT broker in third_party/ is linked into podhub
# only, which runs on servers and is not built here. test/packages
# checks the md5 against LICENSE.
LICENSE = "Apache-2.0"
LIC_FILES_CHKSUM = "file://src/${GO_IMPORT}/LICENSE;md5=3b83ef96387f14655fc854ddc3c6bd57"

GO_IMPORT = "github.com/podvisor/podvisor"
SRC_URI = "git://${GO_IMPORT}.git;protocol=https;branch=main;destsuffix=${GO_SRCURI_DESTSUFFIX}"
# Pin a commit for a reproducible image; AUTOREV follows main.
SRCREV ?= "${AUTOREV}"
PV = "0.0+git${SRCPV}"
S = "${WORKDIR}/git"

inherit go-mod systemd update-rc.d

# podvisor's binaries are static and built without cgo, as every release.
export CGO_ENABLED = "0"
GO_LINKSHARED = ""
GOBUILDFLAGS:remove = "-buildmode=pie"
GO_EXTRA_LDFLAGS = "-X main.version=${PV}"
GO_INSTALL = "${GO_IMPORT}/cmd/podvisor ${GO_IMPORT}/cmd/podvisor-shim ${GO_IMPORT}/cmd/podvisor-containerd"
# go-mod fetches the modules of go.sum in do_compile.
do_compile[network] = "1"

PODVISOR_SRC = "${S}/src/${GO_IMPORT}"

# Each binary with its own flags (build tags, where inlining is off:
# packaging/buildflags.sh), as make and the releases build it; otherwise
# go.bbclass's go_do_compile, one go install per binary.
do_compile() {
	export TMPDIR="${GOTMPDIR}"
	for pkg in ${GO_INSTALL}; do
		${GO} install ${GOBUILDFLAGS} $(sh ${PODVISOR_SRC}/packaging/buildflags.sh $(basename $pkg)) $pkg
	done
}

SYSTEMD_SERVICE:${PN} = "podvisor.service"
SYSTEMD_AUTO_ENABLE:${PN} = "enable"
INITSCRIPT_NAME = "podvisor"
INITSCRIPT_PARAMS = "defaults 90 10"

do_install:append() {
	install -d ${D}${sysconfdir}/podvisor/manifests ${D}${sysconfdir}/podvisor/priorityclasses
	install -m 0644 ${PODVISOR_SRC}/packaging/config.yaml ${D}${sysconfdir}/podvisor/config.yaml
	install -d -m 0700 ${D}${localstatedir}/lib/podvisor
	if ${@bb.utils.contains('DISTRO_FEATURES', 'systemd', 'true', 'false', d)}; then
		install -d ${D}${systemd_system_unitdir}
		install -m 0644 ${PODVISOR_SRC}/packaging/systemd/podvisor.service ${D}${systemd_system_unitdir}/
	fi
	if ${@bb.utils.contains('DISTRO_FEATURES', 'sysvinit', 'true', 'false', d)}; then
		install -d ${D}${sysconfdir}/init.d
		install -m 0755 ${PODVISOR_SRC}/packaging/sysvinit/podvisor ${D}${sysconfdir}/init.d/podvisor
	fi
	# go.bbclass installs the sources for -dev; devices need none.
	rm -rf ${D}${libdir}/go/src
}

PACKAGES =+ "${PN}-containerd"
FILES:${PN}-containerd = "${bindir}/podvisor-containerd"
RDEPENDS:${PN}-containerd = "${PN}"
RRECOMMENDS:${PN}-containerd = "containerd-opencontainers runc-opencontainers"

FILES:${PN} += "${systemd_system_unitdir}/podvisor.service ${localstatedir}/lib/podvisor"
CONFFILES:${PN} = "${sysconfdir}/podvisor/config.yaml"

# Static Go binaries: no GNU_HASH, and go links them itself.
INSANE_SKIP:${PN} += "ldflags already-stripped"
INSANE_SKIP:${PN}-containerd += "ldflags already-stripped"
