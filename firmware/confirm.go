package firmware

import (
	"context"
	"fmt"
	"time"
)

// Verdict is what Confirm decided.
type Verdict string

// Confirm's verdicts.
const (
	// Nothing: no install was waiting; nothing was marked.
	Nothing Verdict = "nothing"
	// Committed: the new system passed the health check and is kept.
	Committed Verdict = "committed"
	// Rejected: the new system failed the health check or missed the
	// deadline; it was marked bad and the bootloader falls back at the
	// next boot.
	Rejected Verdict = "rejected"
	// FellBack: the new system never came up; the previous one runs.
	FellBack Verdict = "fell-back"
)

// Result is Confirm's decision and why, for the report to the hub.
type Result struct {
	Verdict Verdict
	State   BootState
	// Reason says why a system was not committed ("" when it was).
	Reason string
}

// Clock is the time Confirm's deadline runs on; tests pass a fake.
type Clock interface {
	After(time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock is the wall clock.
var RealClock Clock = realClock{}

// Confirm settles the running system after a boot: if it is a freshly
// installed one, it waits up to deadline for healthy (which blocks until
// podvisor is ready: pods adopted, hub reached, or returns why not) and
// then commits it with MarkGood; on a failure or at the deadline it does
// not commit, marks it bad, and returns the reason. A system the
// bootloader fell back to is committed once healthy, and reported. When
// nothing is pending, nothing is marked and healthy is not called.
//
// An error is the driver's (the tool could not be asked, or refused a
// mark); a cancelled ctx (podvisor stopping) marks nothing.
func Confirm(ctx context.Context, d Driver, healthy func(context.Context) error, deadline time.Duration, clock Clock) (Result, error) {
	st, err := d.Booted(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("%s: reading the boot state: %w", d.Name(), err)
	}
	res := Result{Verdict: Nothing, State: st}
	if !st.Pending && !st.FellBack {
		return res, nil
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- healthy(hctx) }()
	var healthErr error
	select {
	case healthErr = <-done:
	case <-clock.After(deadline):
		healthErr = fmt.Errorf("not healthy within the %s commit deadline", deadline)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if st.FellBack {
		res.Verdict = FellBack
		to := "the previous system"
		if st.Slot != "" {
			to = st.Slot
		}
		res.Reason = "the installed system did not come up or its install failed; the device runs " + to
		if healthErr != nil {
			// The old system is what runs: it is not rejected for being
			// unhealthy, only not yet settled.
			res.Reason += fmt.Sprintf(" (not settled: %v)", healthErr)
			return res, nil
		}
		if err := d.MarkGood(ctx); err != nil {
			return res, fmt.Errorf("%s: settling the fallback to %s: %w", d.Name(), st.Slot, err)
		}
		return res, nil
	}
	if healthErr != nil {
		res.Verdict = Rejected
		res.Reason = fmt.Sprintf("health check of %s failed: %v", describe(st), healthErr)
		if err := d.MarkBad(ctx); err != nil {
			return res, fmt.Errorf("%s: marking %s bad: %w", d.Name(), describe(st), err)
		}
		return res, nil
	}
	if err := d.MarkGood(ctx); err != nil {
		return res, fmt.Errorf("%s: marking %s good: %w", d.Name(), describe(st), err)
	}
	res.Verdict = Committed
	return res, nil
}

func describe(st BootState) string {
	s := "the new system"
	if st.Slot != "" {
		s += " " + st.Slot
	}
	if st.Version != "" {
		s += " (version " + st.Version + ")"
	}
	return s
}
