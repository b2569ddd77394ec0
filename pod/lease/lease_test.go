package lease

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOfValidates(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
		err   bool
	}{
		{"1", time.Second, false}, {"86400", 86400 * time.Second, false}, {"30", 30 * time.Second, false},
		{"0", 0, true}, {"86401", 0, true}, {"1.5", 0, true}, {"", 0, true}, {"-10", 0, true}, {"10s", 0, true}, {"007", 0, true},
	} {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{Annotation: tc.value}}}
		d, ok, err := Of(p)
		if !ok || (err != nil) != tc.err || d != tc.want {
			t.Errorf("%q: got %v %v %v, want %v err=%v", tc.value, d, ok, err, tc.want, tc.err)
		}
	}
	if _, ok, err := Of(&v1.Pod{}); ok || err != nil {
		t.Errorf("no annotation: ok=%v err=%v", ok, err)
	}
}

func TestDeviceLeaseNeverRenewedIsExpired(t *testing.T) {
	var l Device
	if l.Valid(time.Hour, time.Now()) || !l.Expiry(time.Hour).IsZero() {
		t.Fatal("a lease never renewed holds")
	}
}

func TestRenewNeverMovesBack(t *testing.T) {
	var l Device
	t0 := time.Unix(1000, 0)
	l.Renew(t0.Add(10 * time.Second))
	l.Renew(t0) // a late answer to an older heartbeat
	if got := l.Expiry(30 * time.Second); !got.Equal(t0.Add(40 * time.Second)) {
		t.Fatalf("expiry %v, want %v", got, t0.Add(40*time.Second))
	}
}

// A timeline in real time with the device's and the hub's clocks skewed
// both ways by hours and the network slow: the device always stops the
// pod (lease + grace after its last renewal) before the hub may replace
// it (lease + grace after it last heard the device).
func TestDeviceStopsBeforeHubReplacesWhateverTheSkew(t *testing.T) {
	const n, grace = 20 * time.Second, 10 * time.Second
	real0 := time.Unix(1_000_000, 0)
	for _, skew := range []time.Duration{-5 * time.Hour, -3 * time.Second, 0, 2 * time.Second, 7 * time.Hour} {
		for _, delay := range []time.Duration{0, 50 * time.Millisecond, 3 * time.Second} {
			deviceClock := func(real time.Time) time.Time { return real.Add(skew) } // the device's own reading
			hubClock := func(real time.Time) time.Time { return real }
			var l Device
			var hubHeard time.Time
			// Heartbeats every 5 s; the hub answers each; the link is cut
			// at 60 s (the beat sent at 60 s is heard, its answer lost).
			for s := time.Duration(0); s <= 60*time.Second; s += 5 * time.Second {
				sent := real0.Add(s)
				heard := sent.Add(delay)
				hubHeard = hubClock(heard)
				if s < 60*time.Second { // its answer arrives: renewed at the send
					l.Renew(deviceClock(sent))
				}
			}
			// The device stops the pod at its expiry plus the grace.
			deviceStop := l.Expiry(n).Add(grace).Add(-skew) // back to real time
			_, replaceAt := Replaceable(hubHeard, n, grace, time.Time{})
			if !deviceStop.Before(replaceAt) && !deviceStop.Equal(replaceAt) {
				t.Errorf("skew %v delay %v: the device stops at %v, after the hub may replace at %v",
					skew, delay, deviceStop.Sub(real0), replaceAt.Sub(real0))
			}
			if ok, _ := Replaceable(hubHeard, n, grace, replaceAt.Add(-time.Millisecond)); ok {
				t.Errorf("skew %v: replaceable before its time", skew)
			}
		}
	}
}

// A device clock that runs slower than real time stretches its lease;
// the hub's slack covers a drift far beyond a crystal's.
func TestSlackCoversASlowDeviceClock(t *testing.T) {
	const n, grace = time.Hour, 30 * time.Second
	real0 := time.Unix(0, 0)
	rate := 1 - 0.015 // 1.5% slow: far beyond a crystal's drift
	// The device measures n+grace on its clock: real time is longer.
	realElapsed := time.Duration(float64(n+grace) / rate)
	deviceStop := real0.Add(realElapsed)
	_, replaceAt := Replaceable(real0, n, grace, real0)
	if deviceStop.After(replaceAt) {
		t.Fatalf("device stops %v after its last renewal, the hub replaces after %v", realElapsed, replaceAt.Sub(real0))
	}
}
