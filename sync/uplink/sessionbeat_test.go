package uplink

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// retainedMessage is a message as a subscription's retained delivery.
type retainedMessage struct{ message }

func (retainedMessage) Retained() bool { return true }

// fakeTimers are sessionBeat's timers on a test's clock: each after is
// kept, and fire runs those due at the clock's time.
type fakeTimers struct {
	now   time.Duration
	timer []fakeTimer
}

type fakeTimer struct {
	at time.Duration
	f  func()
}

func (c *fakeTimers) after(d time.Duration, f func()) {
	c.timer = append(c.timer, fakeTimer{c.now + d, f})
}

// advance moves the clock by d and runs the timers due.
func (c *fakeTimers) advance(d time.Duration) {
	c.now += d
	var left []fakeTimer
	for _, t := range c.timer {
		if t.at <= c.now {
			t.f()
		} else {
			left = append(left, t)
		}
	}
	c.timer = left
}

// beats reports whether a heartbeat was asked for (and takes it).
func beats(a *Agent) bool {
	select {
	case <-a.beat:
		return true
	default:
		return false
	}
}

// A hub session announced while the device is connected is answered by
// a heartbeat at the jittered delay, within sessionBeatWithin;
// announcements while one is due share it; the retained presence a
// connection gets, and the hub going offline, ask for none.
func TestHubSessionAnnouncementIsAnsweredByAJitteredHeartbeat(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	a := agent(t, t.TempDir(), pub)
	clock := &fakeTimers{}
	var asked []time.Duration
	a.sessBeat.after = clock.after
	a.sessBeat.jitter = func(n time.Duration) time.Duration {
		asked = append(asked, n)
		return 1300 * time.Millisecond
	}
	topic := protocol.Topics{}.HubPresence()
	online := func(session string) string {
		return string(protocol.Encode(&protocol.Presence{Online: true, Session: session}))
	}

	a.onHubPresence(nil, retainedMessage{message{topic, online("s0")}})
	a.onHubPresence(nil, message{topic, string(protocol.Encode(&protocol.Presence{Online: false}))})
	clock.advance(time.Hour)
	if beats(a) || len(asked) != 0 {
		t.Fatalf("a heartbeat asked for after the retained presence or the hub going offline (jitter asked %v)", asked)
	}

	a.onHubPresence(nil, message{topic, online("s1")})
	a.onHubPresence(nil, message{topic, online("s2")}) // while the answer is due: shares it
	if len(asked) != 1 || asked[0] != sessionBeatWithin {
		t.Fatalf("jitter asked for %v, want one delay within %v", asked, sessionBeatWithin)
	}
	clock.advance(1299 * time.Millisecond)
	if beats(a) {
		t.Fatal("heartbeat asked for before the jittered delay (1.3 s)")
	}
	clock.advance(time.Millisecond)
	if !beats(a) {
		t.Fatal("no heartbeat asked for at the jittered delay (1.3 s) after the announcement")
	}
	clock.advance(time.Hour)
	if beats(a) {
		t.Fatal("a second heartbeat for announcements that came while the first was due")
	}

	// The next announcement is answered again.
	a.onHubPresence(nil, message{topic, online("s3")})
	clock.advance(sessionBeatWithin)
	if got := beats(a); !got || len(asked) != 2 {
		t.Fatalf("the next announcement: heartbeat asked for %v, jitter asked %d times in all; want a heartbeat and 2", got, len(asked))
	}
}
