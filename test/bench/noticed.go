package main

import (
	"fmt"
	"strings"
	"time"
)

// splitAtNotice splits each containerd restart (exits[i] + restart[i],
// the workload's stamps) at the moment the daemon noticed the exit of the
// round's first instance, its "container exited" log line: detection on
// one side, the daemon's restart path (plugin, containerd, runc) on the
// other, the two rows the kubelet's PLEG event splits on its side. A
// round whose line is not found is left out.
func splitAtNotice(log string, firsts []string, exits []time.Time, restart []time.Duration) (detect, toRun []time.Duration) {
	for i, id := range firsts {
		if id == "" || i >= len(exits) || i >= len(restart) {
			continue
		}
		seen, err := daemonNoticed(log, id)
		if err != nil {
			continue
		}
		detect = append(detect, seen.Sub(exits[i]))
		toRun = append(toRun, exits[i].Add(restart[i]).Sub(seen))
	}
	return detect, toRun
}

// daemonNoticed finds when the daemon logged an instance's exit (slog's
// text handler: time=2026-11-28T15:13:23.878Z ... msg="container exited"
// instance=ID ...; milliseconds).
func daemonNoticed(log, instanceID string) (time.Time, error) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, ` msg="container exited" `) || !strings.Contains(line, " instance="+instanceID+" ") {
			continue
		}
		stamp, ok := strings.CutPrefix(line, "time=")
		if !ok {
			break
		}
		stamp, _, _ = strings.Cut(stamp, " ")
		return time.Parse(time.RFC3339Nano, stamp)
	}
	return time.Time{}, fmt.Errorf("no exit of %s in the daemon's log", instanceID)
}

// printNoticed prints the daemon's split of the restarts.
func printNoticed(detect, toRun []time.Duration) {
	if len(detect) == 0 {
		return
	}
	printDist(fmt.Sprintf("  exit -> daemon noticed (its log, ms; n=%d)", len(detect)), detect)
	printDist(fmt.Sprintf("  daemon noticed -> running (n=%d)", len(toRun)), toRun)
}
