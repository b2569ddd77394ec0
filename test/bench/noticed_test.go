package main

import (
	"testing"
	"time"
)

// Lines as the daemon's slog text handler writes them.
const (
	exitLine  = `time=2026-11-28T15:13:23.878Z level=INFO msg="container exited" instance=b5fe_main_1 exitCode=1 reason=""`
	exitLine2 = `time=2026-11-28T15:13:24.100Z level=INFO msg="container exited" instance=b5fe_main_10 exitCode=1 reason=""`
	startLine = `time=2026-11-28T15:13:23.000Z level=INFO msg="container started" instance=b5fe_main_1`
)

func TestDaemonNoticed(t *testing.T) {
	log := startLine + "\n" + exitLine2 + "\n" + exitLine + "\n"
	got, err := daemonNoticed(log, "b5fe_main_1")
	want := time.Date(2026, 11, 28, 15, 13, 23, 878000000, time.UTC)
	if err != nil || !got.Equal(want) {
		t.Errorf("daemonNoticed = %v, %v; want %v", got, err, want)
	}
	if _, err := daemonNoticed(startLine, "b5fe_main_1"); err == nil {
		t.Error("no exit line: want an error")
	}
}

func TestSplitAtNotice(t *testing.T) {
	exit := time.Date(2026, 11, 28, 15, 13, 23, 870000000, time.UTC)
	detect, toRun := splitAtNotice(exitLine, []string{"b5fe_main_1", "", "gone_main_1"},
		[]time.Time{exit, exit, exit}, []time.Duration{100 * time.Millisecond, time.Second, time.Second})
	if len(detect) != 1 || detect[0] != 8*time.Millisecond || len(toRun) != 1 || toRun[0] != 92*time.Millisecond {
		t.Errorf("split %v / %v; want the one round found: 8ms / 92ms", detect, toRun)
	}
}
