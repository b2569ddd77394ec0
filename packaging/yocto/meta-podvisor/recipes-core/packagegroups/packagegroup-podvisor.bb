SUMMARY = "podvisor for device images"
DESCRIPTION = "packagegroup-podvisor: process pods. \
packagegroup-podvisor-containerd: containerd pods as well."
LICENSE = "MIT"

inherit packagegroup

PACKAGES = "${PN} ${PN}-containerd"

RDEPENDS:${PN} = "podvisor"
RDEPENDS:${PN}-containerd = "podvisor podvisor-containerd"
# From meta-virtualization, when the image has it; a device may also bring
# its own containerd.
RRECOMMENDS:${PN}-containerd = "containerd-opencontainers runc-opencontainers"
