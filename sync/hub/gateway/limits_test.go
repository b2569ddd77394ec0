package gateway

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"
)

func TestFailuresBucketAndForgetting(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := newFailures(2, time.Minute, 3)
	for range 2 {
		if ok, _ := f.allowed("a", t0); !ok {
			t.Fatal("a refused before its failures")
		}
		f.failed("a", t0)
	}
	if ok, wait := f.allowed("a", t0); ok || wait != time.Minute {
		t.Errorf("after 2 failures: %v, wait %v; want refused for a minute", ok, wait)
	}
	if ok, wait := f.allowed("a", t0.Add(45*time.Second)); ok || wait != 15*time.Second {
		t.Errorf("45s later: %v, wait %v; want 15s more", ok, wait)
	}
	if ok, _ := f.allowed("a", t0.Add(time.Minute)); !ok {
		t.Error("a minute later: refused")
	}
	// The table is bounded: full buckets go first, then the fullest.
	f = newFailures(2, time.Minute, 2)
	f.failed("b", t0)
	f.failed("c", t0.Add(30*time.Second))
	f.failed("d", t0.Add(time.Minute)) // b is full again by now, c not yet
	if len(f.byIP) != 2 || f.byIP["c"] == nil || f.byIP["d"] == nil {
		t.Errorf("remembered %v, want c and d", f.byIP)
	}
	f = newFailures(2, time.Hour, 3)
	for i := range 10 {
		f.failed(fmt.Sprint("x", i), t0.Add(time.Duration(i)*time.Second))
	}
	if len(f.byIP) > 3 {
		t.Errorf("%d addresses remembered, want at most 3", len(f.byIP))
	}
}

func TestSessionsExpireAndStayBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSessions(time.Hour, 3)
	var tok [sha256.Size]byte
	first, _ := s.start("a", tok, t0)
	if se, ok := s.get(first, t0.Add(59*time.Minute)); !ok || se.user != "a" {
		t.Errorf("within the hour: %v %v", se, ok)
	}
	if _, ok := s.get(first, t0.Add(time.Hour)); ok {
		t.Error("after the hour: still a session")
	}
	ids := []string{}
	for i := range 5 {
		id, _ := s.start(fmt.Sprint("u", i), tok, t0.Add(time.Duration(i)*time.Minute))
		ids = append(ids, id)
	}
	if len(s.byID) > 3 {
		t.Errorf("%d sessions held, want at most 3", len(s.byID))
	}
	if _, ok := s.get(ids[4], t0.Add(5*time.Minute)); !ok {
		t.Error("the newest session was dropped")
	}
	if _, ok := s.get(ids[0], t0.Add(5*time.Minute)); ok {
		t.Error("the oldest session outlived the bound")
	}
	if _, ok := s.get(string(make([]byte, 100)), t0); ok {
		t.Error("an oversized cookie found a session")
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"": "/ui/", "/ui/pods?ns=a": "/ui/pods?ns=a", "https://evil.example/ui/": "/ui/", "//evil.example/ui/": "/ui/",
		"/api/v1/pods": "/ui/", "/ui/login": "/ui/", "/ui/logout": "/ui/", "/ui/\\evil": "/ui/", "javascript:alert(1)": "/ui/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}
