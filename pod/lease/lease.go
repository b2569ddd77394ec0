// Package lease is the arithmetic of self-fencing leases, shared by the
// device and the hub. A pod annotated fencing.podvisor.io/lease-seconds
// N stops itself on a device that has not heard from its hub for N
// seconds, so the hub may run it elsewhere after N plus its grace
// period of silence, without trusting the device's clock.
//
// Both sides measure durations on their own clock, never a time from the
// other machine. The device renews at the send time of a heartbeat the
// hub then answered, on its monotonic clock; the hub counts from when it
// last received anything from the device, on its own. Every heartbeat
// the hub answers was received after it was sent, so with real time t:
//
//	device stop ≤ t(send) + N + grace ≤ t(hub heard) + N + grace ≤ hub replaces
//
// Only the clocks' rates matter (a device clock running fast stops
// sooner, which is safe; Slack covers a slow one).
package lease

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/vocab"
)

// Annotation opts a pod in: a whole number of seconds from 1 to
// vocab.MaxLeaseSeconds, written plainly (vocab.ParseLeaseSeconds, which
// the hub's StatefulSet controller reads too).
const Annotation = vocab.AnnotationLeaseSeconds

// Of returns a pod's lease: ok false when the pod has none, an error
// naming the annotation when its value is not a whole number of seconds
// from 1 to vocab.MaxLeaseSeconds.
func Of(p *v1.Pod) (d time.Duration, ok bool, err error) {
	if _, ok = p.Annotations[Annotation]; !ok {
		return 0, false, nil
	}
	n, err := vocab.ParseLeaseSeconds(p.Annotations)
	if err != nil {
		return 0, true, err
	}
	return time.Duration(n) * time.Second, true, nil
}

// MarginPercent is how much longer than the device the hub waits: a
// device clock running up to 2% slow (crystals stray by parts per
// million) has still stopped its pods when the hub replaces them. The
// StatefulSet controller's ClockMarginPercent is the same rule.
const MarginPercent = 2

// Slack is the hub's margin on a wait of d (MarginPercent, rounded up).
func Slack(d time.Duration) time.Duration { return (d*MarginPercent + 99) / 100 }

// Device is a device's lease clock: when it last renewed, on its own
// monotonic clock. The zero Device has never renewed (a daemon that has
// just started has no monotonic continuity with a run before): every
// lease is expired until the hub answers.
type Device struct {
	renewed time.Time
}

// Renew renews at sent, the send time of a heartbeat the hub answered;
// an answer to an older heartbeat never moves the lease back.
func (l *Device) Renew(sent time.Time) {
	if sent.After(l.renewed) {
		l.renewed = sent
	}
}

// Renewed is the last renewal; zero before the first.
func (l *Device) Renewed() time.Time { return l.renewed }

// Expiry is when a lease of d runs out; zero when never renewed (it is
// out already).
func (l *Device) Expiry(d time.Duration) time.Time {
	if l.renewed.IsZero() {
		return time.Time{}
	}
	return l.renewed.Add(d)
}

// Valid says a lease of d still holds at now.
func (l *Device) Valid(d time.Duration, now time.Time) bool {
	e := l.Expiry(d)
	return !e.IsZero() && now.Before(e)
}

// Replaceable is the hub's side: whether a pod with a lease of d and a
// grace period of grace, on a device silent since silentSince (the hub's
// clock: when it last heard the device, or when the hub started if
// later), is certainly stopped at now, and when it will be.
func Replaceable(silentSince time.Time, d, grace time.Duration, now time.Time) (bool, time.Time) {
	at := silentSince.Add(d + grace + Slack(d+grace))
	return !now.Before(at), at
}
