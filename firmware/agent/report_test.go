package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// The log at Info has each phase once, not every percent of it: progress
// goes to the hub (the transport), which gets every report.
func TestReportLogsPhasesNotProgress(t *testing.T) {
	var logged bytes.Buffer
	hub := &fakeHub{}
	u := New(Options{DataDir: t.TempDir(), Device: "d", Version: "v1.0.0", Transport: hub,
		Log: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Now: func() time.Time { return time.Unix(0, 0) }})
	st := protocol.UpdateState{Order: 1, Kind: protocol.ReleaseAgent, Version: "v1.1.0", Phase: protocol.UpdateDownloading}
	for p := 0; p <= 100; p++ {
		st.Percent = p
		u.report(st)
	}
	st.Phase, st.Percent = protocol.UpdateVerifying, 0
	u.report(st)
	st.Phase, st.Reason = protocol.UpdateFailed, "bad"
	u.report(st)
	if len(hub.reports) != 103 {
		t.Errorf("the transport got %d reports, want all 103", len(hub.reports))
	}
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	var phases []string
	for _, l := range lines {
		_, msg, _ := strings.Cut(l, `msg="`)
		msg, _, _ = strings.Cut(msg, `"`)
		_, pct, _ := strings.Cut(l, "percent=")
		pct, _, _ = strings.Cut(pct, " ")
		phases = append(phases, msg+" "+pct)
	}
	want := []string{"update Downloading 0", "update Downloading 100", "update Verifying 0", "update Failed 0"}
	if strings.Join(phases, ", ") != strings.Join(want, ", ") {
		t.Errorf("logged %q, want %q", phases, want)
	}
}
