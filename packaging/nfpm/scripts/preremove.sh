#!/bin/sh
# podvisor package, before removal. An upgrade does nothing here: stopping
# the service would be harmless to the pods, but there is no need. A
# removal stops every pod first (podvisor drain, lowest priority first),
# since nothing would supervise them, then the service. Called as
#   deb/ipk: upgrade NEW-VERSION | remove | failed-upgrade ...
#   rpm: 1 (upgrade) | 0 (removal)   apk: OLD-VERSION (pre-deinstall)
set -e
# Files are under $PODVISOR_PKG_ROOT (tests point it at a directory of
# their own; empty on a device). An offline install into an image
# (dpkg --force-script-chrootless sets DPKG_ROOT) touches no service.
root=${PODVISOR_PKG_ROOT:-}
[ -z "${DPKG_ROOT:-}" ] || exit 0
case "${1:-}" in
remove) ;;
upgrade | failed-upgrade | deconfigure) exit 0 ;;
'' | *[!0-9]*) ;;
*) [ "$1" -eq 0 ] || exit 0 ;;
esac

if [ -S ${root}/run/podvisor/podvisor.sock ]; then
	podvisor drain || echo "podvisor: drain failed; pods may still be running" >&2
fi
if [ -d ${root}/run/systemd/system ] && command -v systemctl >/dev/null; then
	systemctl disable --now podvisor.service || true
elif command -v rc-update >/dev/null && [ -d ${root}/etc/runlevels ]; then
	rc-service podvisor stop || true
	rc-update del podvisor default || true
elif [ -x ${root}/etc/init.d/podvisor ]; then
	${root}/etc/init.d/podvisor stop || true
fi
exit 0
