#!/bin/sh
# podvisor apk, after an upgrade: apk runs post-upgrade, not post-install,
# so this is postinstall.sh's upgrade case (restart the daemon if it was
# running; the pods keep running).
root=${PODVISOR_PKG_ROOT:-}
if command -v rc-service >/dev/null && [ -d ${root}/etc/runlevels ]; then
	rc-service --ifstarted podvisor restart || true
elif [ -x ${root}/etc/init.d/podvisor ]; then
	${root}/etc/init.d/podvisor status >/dev/null 2>&1 && ${root}/etc/init.d/podvisor restart || true
fi
exit 0
