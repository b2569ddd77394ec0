package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMaxGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	beats := []time.Time{at(0), at(100), at(200), at(650), at(750), at(850)}
	for _, c := range []struct {
		name     string
		from, to time.Time
		gap      time.Duration
		end      time.Time
	}{
		{"a stop inside", at(50), at(800), 450 * time.Millisecond, at(650)},
		{"from the window's start", at(-300), at(210), 300 * time.Millisecond, at(0)},
		{"to the window's end, no beat after", at(700), at(1500), 650 * time.Millisecond, at(1500)},
		{"no beat inside", at(210), at(640), 430 * time.Millisecond, at(640)},
	} {
		gap, end := maxGap(beats, c.from, c.to)
		if gap != c.gap || !end.Equal(c.end) {
			t.Errorf("%s: maxGap = %v ending %v, want %v ending %v", c.name, gap, end.Sub(t0), c.gap, c.end.Sub(t0))
		}
	}
}

func TestHeartbeats(t *testing.T) {
	path := filepath.Join(t.TempDir(), "heartbeat")
	// The last line cut by a write under way is left out; lines out of
	// order are sorted.
	if err := os.WriteFile(path, []byte("2000000000\n1000000000\n3000000000\n40000"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := heartbeats(path)
	if err != nil || len(got) != 3 || !got[0].Equal(time.Unix(1, 0)) || !got[2].Equal(time.Unix(3, 0)) {
		t.Errorf("heartbeats = %v, %v", got, err)
	}
}
