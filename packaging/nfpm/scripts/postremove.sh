#!/bin/sh
# podvisor package, after removal. The data dir (pod state, logs,
# containers' files) goes only on a purge (dpkg --purge); rpm and apk have
# no purge and keep it. Called as
#   deb/ipk: remove | purge | upgrade ...   rpm: 0 | 1   apk: OLD-VERSION
set -e
# Files are under $PODVISOR_PKG_ROOT (tests point it at a directory of
# their own; empty on a device). An offline install into an image
# (dpkg --force-script-chrootless sets DPKG_ROOT) touches no service.
root=${PODVISOR_PKG_ROOT:-}
[ -z "${DPKG_ROOT:-}" ] || exit 0
case "${1:-}" in
purge)
	# The tmpfs of the process containers' private specs stays mounted
	# until reboot: let it go first, or rm cannot remove its mount point.
	umount -l ${root}/var/lib/podvisor/private 2>/dev/null || true
	rm -rf ${root}/var/lib/podvisor ${root}/run/podvisor
	command -v update-rc.d >/dev/null && update-rc.d podvisor remove >/dev/null || true
	;;
remove | 0)
	[ -d ${root}/run/systemd/system ] && command -v systemctl >/dev/null && systemctl daemon-reload || true
	;;
esac
exit 0
