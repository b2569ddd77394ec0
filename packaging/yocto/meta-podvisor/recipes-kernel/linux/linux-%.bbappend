# The kernel options podvisor needs (podvisor check-kernel lists the same
# ones, from kernel/requirements.go). Config fragments apply to kernels
# built with kernel-yocto (linux-yocto and the BSP kernels that inherit it).
FILESEXTRAPATHS:prepend := "${THISDIR}/files:"
SRC_URI += "file://podvisor.cfg"
# Options only containerd pods need (runc, overlayfs, the CNI bridge).
PODVISOR_CONTAINERD_KERNEL ?= "1"
SRC_URI += "${@'file://podvisor-containerd.cfg' if d.getVar('PODVISOR_CONTAINERD_KERNEL') == '1' else ''}"
