package devicelink

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// fakeToken is a publish token the test completes.
type fakeToken struct {
	mqtt.Token
	done chan struct{}
}

func (f *fakeToken) Done() <-chan struct{} { return f.done }

func newToken() *fakeToken { return &fakeToken{done: make(chan struct{})} }

// A device's desired publish unanswered after the bound is stalled; an
// answered one is forgotten; a newer publish replaces the older.
func TestPubWatchStalled(t *testing.T) {
	var w pubWatch
	t0 := time.Unix(1000, 0)
	a, b, c := newToken(), newToken(), newToken()
	w.add("gw-a", a, t0)
	w.add("gw-b", b, t0)
	w.add("gw-c", c, t0.Add(20*time.Second))
	if got := w.stalled(t0.Add(29*time.Second), 30*time.Second); len(got) != 0 {
		t.Fatalf("stalled before the bound: %v", got)
	}
	close(a.done) // the broker answered gw-a
	got := w.stalled(t0.Add(30*time.Second), 30*time.Second)
	if !slices.Equal(got, []string{"gw-b"}) {
		t.Fatalf("stalled %v, want [gw-b]", got)
	}
	if _, ok := w.m["gw-a"]; ok {
		t.Fatal("an answered publish is still watched")
	}
	// gw-b published again: watched from then on.
	b2 := newToken()
	w.add("gw-b", b2, t0.Add(30*time.Second))
	got = w.stalled(t0.Add(55*time.Second), 30*time.Second)
	slices.Sort(got)
	if !slices.Equal(got, []string{"gw-c"}) {
		t.Fatalf("stalled %v, want [gw-c]", got)
	}
}

// The hub reconnects starting after the broker it was on.
func TestRotatePast(t *testing.T) {
	var servers []*url.URL
	for _, s := range []string{"mqtts://a:1", "mqtts://b:1", "mqtts://c:1"} {
		u, _ := url.Parse(s)
		servers = append(servers, u)
	}
	hosts := func(us []*url.URL) string {
		var h []string
		for _, u := range us {
			h = append(h, u.Host)
		}
		return strings.Join(h, " ")
	}
	for last, want := range map[string]string{"": "a:1 b:1 c:1", "mqtts://a:1": "b:1 c:1 a:1", "mqtts://c:1": "a:1 b:1 c:1", "mqtts://x:1": "a:1 b:1 c:1"} {
		if got := hosts(rotatePast(servers, last)); got != want {
			t.Errorf("after %q: %s, want %s", last, got, want)
		}
	}
	if got := hosts(rotatePast(rotatePast(servers, "mqtts://a:1"), "mqtts://b:1")); got != "c:1 a:1 b:1" {
		t.Errorf("twice: %s", got)
	}
}
