package main

import (
	"testing"
	"time"
)

// A round counts each member once, only at the round's version, and
// ends when every member has it.
func TestVersionWait(t *testing.T) {
	var w versionWait
	w.reset("v2", 2)
	w.saw("a", "v1")
	w.saw("a", "v2")
	w.saw("a", "v2")
	select {
	case <-w.all:
		t.Fatal("done with one of two members")
	default:
	}
	w.saw("b", "v2")
	got, err := w.wait(time.Hour, "test")
	if err != nil || len(got) != 2 || got[0] > got[1] {
		t.Fatalf("wait: %v %v, want two sorted times", got, err)
	}
	w.reset("v3", 1)
	if _, err := w.wait(0, "round v3"); err == nil {
		t.Fatal("a round nobody finished ended without an error")
	}
}

func TestSpread(t *testing.T) {
	same := []deviceBytes{{index: 490}, {index: 490}}
	if got := spread(same, func(b deviceBytes) int64 { return b.index }); got != "490" {
		t.Errorf("spread of equal values: %q", got)
	}
	mixed := []deviceBytes{{requests: 2}, {requests: 1}, {requests: 3}}
	if got := spread(mixed, func(b deviceBytes) int64 { return b.requests }); got != "1..3" {
		t.Errorf("spread: %q, want 1..3", got)
	}
	if n := countOver(mixed, 1); n != 2 {
		t.Errorf("countOver: %d, want 2", n)
	}
}
