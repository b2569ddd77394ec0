# The self-update through the packaged unit: podhub runs in the VM, the
# device updates itself to v2 (this tree, built as released) with its
# pods untouched, then to a v3 that only fails, which the launcher rolls
# back by itself across systemd's restarts. test/vm/systemd.sh puts the
# releases in $rel. Sourced by systemd-check.sh, which defines fail,
# running, ready, statustext, and the pods' processes (low_before,
# high_before, ctrpid in ctrscope) found by its watchdog check.
rel=/usr/local/lib/podvisor-release
hubdata=/var/lib/podhub
device=podvisor-vm
hub() { podhub --data-dir "$hubdata" "$@"; }
uptime_s() { cut -d. -f1 /proc/uptime; }
# v2's version is its binary's stamp, v3 one patch above it.
v2=$($rel/v2/podvisor version --socket /nonexistent | awk '{ print $2; exit }')
v3=${v2%.*}.$((${v2##*.} + 1))

# hub_start: podhub serves in the VM (a transient unit: gone at
# shutdown), the device is enrolled and its config gains the hub section
# and the commit deadline, read by the next daemon systemd starts; v2 is
# pushed meanwhile.
hub_start() {
  t=$(uptime_s)
  hub init >/dev/null && hub device add $device --out /etc/podvisor/hub --install-dir /etc/podvisor/hub \
    --url mqtts://127.0.0.1:8883 >/dev/null || fail "podhub init, device add"
  systemd-run --quiet --unit podhub -p StandardOutput=journal -p StandardError=journal podhub --data-dir "$hubdata" serve ||
    fail "systemd-run podhub"
  # The exec to the new daemon's commit takes 5 to 7 s under emulation
  # (the journal's lines below): 60 s leaves room for a loaded host.
  { cat /etc/podvisor/hub/podvisor.yaml; printf 'update:\n  commitTimeout: 60s\n'; } >> /etc/podvisor/config.yaml
  until_ok 30 hub get devices || fail "podhub serve: $(journalctl -u podhub --no-pager | tail -5)"
  pushed_from=$(uptime_s)
  { hub release push --version "$v2" --file $rel/v2/podvisor --file $rel/v2/podvisor-shim --file $rel/v2/podvisor-containerd \
    > /run/push-v2.log 2>&1; uptime_s > /run/push-v2.end; } &
  pushpid=$!
  echo "VM: podhub serving, $device enrolled, the push of $v2 under way ($(($(uptime_s) - t)) s)"
}

# The pods' processes, which no update may touch, still run the pods'
# commands (looked up by PID: a search of /proc forks once a process,
# slow under emulation).
pods_same() {
  grep -q "stopped low" "/proc/$low_before/cmdline" && grep -q "stopped high" "/proc/$high_before/cmdline" &&
    grep -qx "$ctrpid" "/sys/fs/cgroup$ctrscope/cgroup.procs"
}
pods_now() { echo "low $(pid_of low) high $(pid_of high) ctr $(head -1 "/sys/fs/cgroup$ctrscope/cgroup.procs" 2>/dev/null)"; }
daemon_version() { podvisor version 2>/dev/null | awk '$1 == "daemon" { print $2 }'; }
current_slot() { readlink /var/lib/podvisor/agent/current; }
hubconnected() { statustext '^running [0-9]+ pods( \(.*\))?; hub connected'; }
# sample_unit FILE: systemd's view of the unit, each change a line, twice
# a second until killed.
sample_unit() {
  last=
  while :; do
    now=$(systemctl show -p ActiveState -p StatusText podvisor | tr '\n' ' ')
    [ "$now" = "$last" ] || echo "$now" >> "$1"
    last=$now
    sleep 0.5
  done
}

update_checks() {
  pods="low $low_before high $high_before ctr $ctrpid"
  t=$(uptime_s)
  wait "$pushpid"; grep -q "release podvisor $v2 pushed" /run/push-v2.log &&
    ok "$v2 pushed (podvisor, podvisor-shim, podvisor-containerd) in $(($(cat /run/push-v2.end) - pushed_from)) s, waited for $(($(uptime_s) - t)) s after the watchdog check" ||
    fail "push $v2: $(cat /run/push-v2.log)"
  v1=$(daemon_version) # the test build's stamp, below v2's
  until_ok 30 hubconnected && until_ok 30 sh -c "podhub --data-dir $hubdata get devices | grep -q '^$device *Ready .* $v1 '" &&
    ok "$device runs $v1, Ready at the hub; status: $(systemctl show -P StatusText podvisor)" ||
    fail "$device at the hub: $(hub get devices 2>&1); $(systemctl show -p StatusText podvisor)"

  # v2: the daemon installs it into a slot and executes the launcher in
  # its own process, which executes v2 on trial; v2 adopts the pods,
  # reaches the hub and commits. systemd sees one main process all along.
  t=$(uptime_s)
  main=$(systemctl show -P MainPID podvisor) restarts=$(systemctl show -P NRestarts podvisor)
  since=$(date +%s)
  sample_unit /run/unit-v2 &
  sampler=$!
  hub update --version "$v2" --device $device >/dev/null || fail "podhub update $v2"
  out=$(hub update status "podvisor-$v2" --timeout 150s 2>&1) && echo "$out" | grep -q complete &&
    ok "update to $v2 complete at the hub, $(($(uptime_s) - t)) s after podhub update" ||
    fail "update $v2: $out; $(hub describe update "podvisor-$v2" 2>&1); $(journalctl -u podvisor --no-pager | grep -v 'msg="\(container\|pod\)' | tail -20)"
  kill $sampler
  echo "$out" | sed 's/^/VM:   /'
  # RELOADING=1 from the daemon that executes the launcher, READY=1 from
  # the next one once it adopted the pods: systemd shows the unit
  # reloading for seconds in between (the status lines of both daemons).
  grep -q 'ActiveState=reloading' /run/unit-v2 &&
    tail -1 /run/unit-v2 | grep -q 'ActiveState=active' && ok "systemd saw the unit reloading across the exec, then active" ||
    fail "unit states: $(cat /run/unit-v2)"
  sed 's/^/VM:   unit: /' /run/unit-v2
  journalctl -u podvisor -o cat --no-pager --since "@$since" |
    grep -E 'launcher:|update (Verifying|Installing|Restarting|Committed)|podvisor.service|Started|Reload' | sed 's/^/VM:   journal: /'
  hub get devices | grep -q "^$device *Ready .* $v2 *Committed $v2 " && ok "podhub get devices: $device $v2, Committed" ||
    fail "get devices: $(hub get devices 2>&1)"
  until_ok 10 sh -c "podvisor version | grep -q '^daemon *$v2 '" && ok "podvisor version (the socket): $(podvisor version | grep daemon)" ||
    fail "podvisor version: $(podvisor version 2>&1)"
  now_main=$(systemctl show -P MainPID podvisor) now_restarts=$(systemctl show -P NRestarts podvisor)
  [ "$now_main" = "$main" ] && [ "$now_restarts" = "$restarts" ] &&
    ok "the same main process $main all along (exec in place), NRestarts still $restarts" ||
    fail "MainPID $main -> $now_main, NRestarts $restarts -> $now_restarts"
  until_ok 10 hubconnected && [ "$(systemctl show -P ActiveState podvisor)" = active ] &&
    ok "active, status: $(systemctl show -P StatusText podvisor)" || fail "after $v2: $(systemctl show -p ActiveState,StatusText podvisor)"
  until_ok 20 running low && until_ok 20 ready ctr && pods_same &&
    ok "the pods run on, adopted: $pods" || fail "pods after $v2: $(pods_now), were $pods; $(podvisor get pods 2>&1)"
  case $(current_slot) in slots/$v2-*) ok "agent/current -> $(current_slot)" ;; *) fail "agent/current -> '$(current_slot)'" ;; esac
  echo "VM: the update to $v2 took $(($(uptime_s) - t)) s"

  # v3 starts and exits 1 at once: systemd restarts it (Restart=always),
  # the launcher counts each start of the trial and, its tries spent,
  # rolls back to v2, which tells the hub.
  t=$(uptime_s)
  since=$(date +%s)
  restarts=$(systemctl show -P NRestarts podvisor)
  hub release push --version "$v3" --file $rel/v3/podvisor >/dev/null && hub update --version "$v3" --device $device >/dev/null ||
    fail "push and update $v3"
  out=$(hub update status "podvisor-$v3" --timeout 150s 2>&1)
  echo "$out" | grep -q "halted: .*$device.*$v3 started 2 times without becoming ready" &&
    ok "update to $v3 halted at the hub, $(($(uptime_s) - t)) s after podhub update: $(echo "$out" | tail -1)" ||
    fail "update $v3: $out; $(journalctl -u podvisor --no-pager --since "@$since" | grep -v 'msg="\(container\|pod\)' | tail -30)"
  hub get devices | grep -q "^$device *Ready .* $v2 *RolledBack: $v3 started 2 times" &&
    ok "podhub get devices: $device $v2, RolledBack" || fail "get devices: $(hub get devices 2>&1)"
  until_ok 20 sh -c "podvisor version | grep -q '^daemon *$v2 '" && ok "podvisor version: $(podvisor version | grep daemon)" ||
    fail "podvisor version after the rollback: $(podvisor version 2>&1)"
  now_restarts=$(systemctl show -P NRestarts podvisor)
  [ "$now_restarts" = $((restarts + 2)) ] && ok "systemd restarted the failing $v3 twice (NRestarts $restarts -> $now_restarts)" ||
    fail "NRestarts $restarts -> $now_restarts, want +2"
  until_ok 10 hubconnected && [ "$(systemctl show -P ActiveState podvisor)" = active ] &&
    ok "active, status: $(systemctl show -P StatusText podvisor)" || fail "after the rollback: $(systemctl show -p ActiveState,StatusText podvisor)"
  until_ok 20 running low && until_ok 20 ready ctr && pods_same &&
    ok "the pods run on, adopted: $pods" || fail "pods after the rollback: $(pods_now), were $pods; $(podvisor get pods 2>&1)"
  case $(current_slot) in slots/$v2-*) ok "agent/current -> $(current_slot) again" ;; *) fail "agent/current -> '$(current_slot)'" ;; esac
  log=$(journalctl -u podvisor -o cat --no-pager --since "@$since")
  [ "$(echo "$log" | grep -c '^broken on purpose$')" = 2 ] && echo "$log" | grep -q "launcher: rolled back\" reason=\"$v3 started 2 times" &&
    ok "the journal has $v3's two failed starts and the launcher's rollback" ||
    fail "journal: $(echo "$log" | grep -v 'msg="\(container\|pod\)' | head -30)"
  echo "$log" | grep -E 'broken on purpose|launcher:|Main process exited|restart counter|Started podvisor|update (RolledBack|Restarting)' | sed 's/^/VM:   journal: /'
  echo "VM: the update to $v3 and its rollback took $(($(uptime_s) - t)) s;" \
    "$(awk '/^MemAvailable/ { print int($2 / 1024) }' /proc/meminfo) MiB of memory available"
}
