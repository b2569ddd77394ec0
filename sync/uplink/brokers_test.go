package uplink

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func order(b *brokerList) string {
	var s []string
	for _, u := range b.order() {
		s = append(s, u.Host)
	}
	return strings.Join(s, " ")
}

// A device starts at a place its ID chooses and, when its connection is
// lost, starts the next one after the broker it was on.
func TestBrokerListMovesOn(t *testing.T) {
	urls := []string{"mqtts://a:1", "mqtts://b:2", "mqtts://c:3"}
	starts := map[string]bool{}
	for _, id := range []string{"gw-1", "gw-2", "gw-3", "gw-4", "gw-5", "gw-6", "gw-7", "gw-8"} {
		b, err := newBrokerList(urls, id)
		if err != nil {
			t.Fatal(err)
		}
		starts[b.order()[0].Host] = true
	}
	if len(starts) < 2 {
		t.Errorf("eight devices all start on %v: a fleet would not spread", starts)
	}
	b, _ := newBrokerList(urls, "gw-1")
	first := b.order()
	if len(first) != 3 {
		t.Fatalf("order %v", first)
	}
	// Connected to the second one tried; lost: the next starts after it.
	b.attempt(first[0])
	b.attempt(&url.URL{Scheme: first[1].Scheme, Host: first[1].Host})
	if b.current() != first[1].String() {
		t.Fatalf("current %s, want %s", b.current(), first[1])
	}
	b.lost()
	if got := b.order()[0].Host; got != first[2].Host {
		t.Errorf("after losing %s the next connection starts at %s, want %s", first[1].Host, got, first[2].Host)
	}
	b.attempt(b.order()[0])
	b.lost()
	if got := order(b); got != order(&brokerList{urls: first}) {
		t.Errorf("round the list: %s, want %s", got, order(&brokerList{urls: first}))
	}
}

func TestBrokerListRefuses(t *testing.T) {
	for _, urls := range [][]string{nil, {""}, {"mqtts://"}, {"a:1883"}, {"mqtts://a:1", "://x"}} {
		if _, err := newBrokerList(urls, "gw-1"); err == nil {
			t.Errorf("%q: no error", urls)
		}
	}
	b, err := newBrokerList([]string{"mqtts://only:8883", " "}, "gw-9")
	if err != nil || order(b) != "only:8883" {
		t.Errorf("one broker: %v %v", order(b), err)
	}
}

// A lost connection starts the delays over only once it had been
// stable; a fleet that a broker keeps accepting and dropping backs off,
// doubling to the maximum, instead of coming back in the same burst.
func TestDelayAfterLoss(t *testing.T) {
	const minDelay, maxDelay = time.Second, 2 * time.Minute
	for _, tc := range []struct {
		name          string
		delay, lasted time.Duration
		want          time.Duration
	}{
		{"stable connection, first loss", minDelay, time.Hour, minDelay},
		{"stable after a long backoff", 64 * time.Second, stableConnection, minDelay},
		{"dropped soon after connecting", minDelay, 5 * time.Second, 2 * time.Second},
		{"dropped again", 8 * time.Second, time.Second, 16 * time.Second},
		{"just short of stable", 4 * time.Second, stableConnection - time.Millisecond, 8 * time.Second},
		{"capped", 90 * time.Second, 0, maxDelay},
	} {
		if got := delayAfterLoss(tc.delay, tc.lasted, minDelay, maxDelay); got != tc.want {
			t.Errorf("%s: delayAfterLoss(%v, lasted %v) = %v, want %v", tc.name, tc.delay, tc.lasted, got, tc.want)
		}
	}
}
