#!/bin/sh
# podvisor package, after install or upgrade. A first install enables and
# starts the service. An upgrade restarts the daemon only if it was
# running: the pods keep running (SIGTERM leaves them unless
# --stop-pods-on-exit, and the unit's KillMode=process spares their shims)
# and the new daemon adopts them. Called as
#   deb/ipk: configure [OLD-VERSION]   rpm: 1 (install) | 2 (upgrade)
#   apk: NEW-VERSION (post-install); post-upgrade runs with "upgrade"
set -e
# Files are under $PODVISOR_PKG_ROOT (tests point it at a directory of
# their own; empty on a device). An offline install into an image
# (dpkg --force-script-chrootless sets DPKG_ROOT) touches no service.
root=${PODVISOR_PKG_ROOT:-}
[ -z "${DPKG_ROOT:-}" ] || exit 0
upgrade=false
case "${1:-}" in
configure) [ -z "${2:-}" ] || upgrade=true ;;
upgrade) upgrade=true ;;
abort-*) exit 0 ;;
'' | *[!0-9]*) ;;
*) [ "$1" -lt 2 ] || upgrade=true ;;
esac

mkdir -p ${root}/var/lib/podvisor ${root}/etc/podvisor/manifests
chmod 0700 ${root}/var/lib/podvisor

if [ -d ${root}/run/systemd/system ] && command -v systemctl >/dev/null; then
	systemctl daemon-reload || true
	if [ "$upgrade" = true ]; then
		systemctl try-restart podvisor.service || true
	else
		systemctl enable podvisor.service || true
		systemctl start podvisor.service || true
	fi
elif command -v rc-update >/dev/null && [ -x ${root}/etc/init.d/podvisor ] && [ -d ${root}/etc/runlevels ]; then
	if [ "$upgrade" = true ]; then
		rc-service --ifstarted podvisor restart || true
	else
		rc-update add podvisor default || true
		rc-service podvisor start || true
	fi
elif [ -x ${root}/etc/init.d/podvisor ]; then
	if [ "$upgrade" = true ]; then
		${root}/etc/init.d/podvisor status >/dev/null 2>&1 && ${root}/etc/init.d/podvisor restart || true
	else
		if command -v update-rc.d >/dev/null; then
			update-rc.d podvisor defaults >/dev/null || true
		elif command -v chkconfig >/dev/null; then
			chkconfig --add podvisor || true
		fi
		${root}/etc/init.d/podvisor start || true
	fi
fi
exit 0
