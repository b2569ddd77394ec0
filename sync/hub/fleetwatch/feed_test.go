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
