package fleetwatch

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestChangesCoalescePerDevice(t *testing.T) {
	var f Feed
	s := f.Subscribe()
	defer s.Close()
	for range 1000 {
		f.Publish("a", Pods)
	}
	f.Publish("a", Node)
	f.Publish("b", Events)
	f.Publish("", Workloads)
	got := s.Take()
	slices.SortFunc(got, func(x, y Change) int {
		if x.Device < y.Device {
			return -1
		}
		return 1
	})
	want := []Change{{"", Workloads}, {"a", Pods | Node}, {"b", Events}}
	if !slices.Equal(got, want) {
		t.Fatalf("took %v, want %v", got, want)
	}
	if left := s.Take(); len(left) != 0 {
		t.Fatalf("a second Take returned %v, want nothing", left)
	}
	if f.Seq() != 1003 {
		t.Fatalf("Seq = %d, want 1003 publications", f.Seq())
	}
}

func TestNextWaitsForAPublication(t *testing.T) {
	var f Feed
	s := f.Subscribe()
	go f.Publish("dev", Node)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := s.Next(ctx)
	if err != nil || len(got) != 1 || got[0] != (Change{"dev", Node}) {
		t.Fatalf("Next = %v, %v; want the device's node change", got, err)
	}
	s.Close()
	f.Publish("dev", Pods)
	if left := s.Take(); len(left) != 0 {
		t.Fatalf("a closed subscription took %v", left)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := s.Next(ctx); err == nil {
		t.Fatal("Next returned with nothing published and its context ended, want the context's error")
	}
}

func TestNilFeedDropsPublications(t *testing.T) {
	var f *Feed
	f.Publish("a", Node)
	s := f.Subscribe()
	s.Close()
	if f.Seq() != 0 {
		t.Fatal("a nil feed counted a publication")
	}
}

// A device heard from and then silent is published again when its
// timeout passes, though nothing was written; a newer report moves its
// deadline.
func TestSilenceIsPublishedAtTheDeadline(t *testing.T) {
	var f Feed
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.WatchSilence(ctx, 300*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	s := f.Subscribe()
	defer s.Close()
	// The watch takes reports once it runs: wait for its queue.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		running := f.heard != nil
		f.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the silence watch did not start within 10 s")
		}
	}
	start := time.Now()
	f.Heard("quiet", start)
	f.Heard("chatty", start)
	// Heard again, by a report a second newer: its deadline moves. (The
	// report's own time, not a sleep: a late wake-up cannot merge the
	// two deadlines.)
	f.Heard("chatty", start.Add(time.Second))
	s.Take() // the reports' own changes
	wait, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	got, err := s.Next(wait)
	if err != nil || len(got) != 1 || got[0] != (Change{"quiet", Node}) {
		t.Fatalf("first silence published %v, %v; want quiet's node", got, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("quiet published silent after %s, before its 300ms timeout", took)
	}
	got, err = s.Next(wait)
	if err != nil || len(got) != 1 || got[0] != (Change{"chatty", Node}) {
		t.Fatalf("second silence published %v, %v; want chatty's node", got, err)
	}
	if took := time.Since(start); took < 1300*time.Millisecond {
		t.Fatalf("chatty published silent after %s, before 300ms after its newer report", took)
	}
}
