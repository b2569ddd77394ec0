package firmware

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeDriver records the marks Confirm makes.
type fakeDriver struct {
	state      BootState
	bootErr    error
	marks      []string
	markGoodEr error
}

func (f *fakeDriver) Name() string { return "fake" }
func (f *fakeDriver) Install(context.Context, string, func(Progress)) error {
	return errors.New("not used")
}
func (f *fakeDriver) Booted(context.Context) (BootState, error) { return f.state, f.bootErr }
func (f *fakeDriver) MarkGood(context.Context) error {
	f.marks = append(f.marks, "good")
	return f.markGoodEr
}
func (f *fakeDriver) MarkBad(context.Context) error {
	f.marks = append(f.marks, "bad")
	return nil
}

// fakeClock fires the deadline when the test closes fire.
type fakeClock struct {
	asked chan time.Duration
	fire  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{asked: make(chan time.Duration, 1), fire: make(chan time.Time)}
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.asked <- d
	return c.fire
}

func healthy(context.Context) error { return nil }

func TestConfirm(t *testing.T) {
	pending := BootState{Pending: true, Slot: "rootfs.1", Version: "2.0"}
	for _, tc := range []struct {
		name        string
		state       BootState
		health      func(context.Context) error
		wantVerdict Verdict
		wantMarks   string
		wantReason  string
	}{
		{"nothing pending: no health check, no mark", BootState{Slot: "rootfs.0"},
			func(context.Context) error { panic("health check called with nothing pending") }, Nothing, "", ""},
		{"healthy: committed", pending, healthy, Committed, "good", ""},
		{"unhealthy: rejected with the reason", pending, func(context.Context) error { return errors.New("2 of 5 pods not adopted") },
			Rejected, "bad", "health check of the new system rootfs.1 (version 2.0) failed: 2 of 5 pods not adopted"},
		{"fell back, healthy: settled", BootState{FellBack: true, Slot: "rootfs.0"}, healthy, FellBack, "good",
			"the installed system did not come up or its install failed; the device runs rootfs.0"},
		{"fell back, unhealthy: the old system is not marked bad", BootState{FellBack: true, Slot: "rootfs.0"},
			func(context.Context) error { return errors.New("hub unreachable") }, FellBack, "", "(not settled: hub unreachable)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDriver{state: tc.state}
			res, err := Confirm(context.Background(), d, tc.health, time.Minute, RealClock)
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != tc.wantVerdict || strings.Join(d.marks, ",") != tc.wantMarks || !strings.Contains(res.Reason, tc.wantReason) {
				t.Errorf("verdict %s, marks %q, reason %q; want %s, %q, reason containing %q",
					res.Verdict, d.marks, res.Reason, tc.wantVerdict, tc.wantMarks, tc.wantReason)
			}
			if res.State != tc.state {
				t.Errorf("state %+v, want %+v", res.State, tc.state)
			}
		})
	}
}

// A health check that never answers is cut at the deadline, told to stop,
// and the system is marked bad.
func TestConfirmDeadline(t *testing.T) {
	d := &fakeDriver{state: BootState{Pending: true, Slot: "rootfs.1"}}
	clock := newFakeClock()
	stopped := make(chan struct{})
	hang := func(ctx context.Context) error {
		<-ctx.Done()
		close(stopped)
		return ctx.Err()
	}
	type out struct {
		res Result
		err error
	}
	got := make(chan out, 1)
	go func() {
		res, err := Confirm(context.Background(), d, hang, 90*time.Second, clock)
		got <- out{res, err}
	}()
	if d := <-clock.asked; d != 90*time.Second {
		t.Fatalf("deadline %s, want 90s", d)
	}
	close(clock.fire)
	o := <-got
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.Verdict != Rejected || !strings.Contains(o.res.Reason, "not healthy within the 1m30s commit deadline") {
		t.Errorf("got %+v", o.res)
	}
	if strings.Join(d.marks, ",") != "bad" {
		t.Errorf("marks %q, want bad", d.marks)
	}
	<-stopped // the health check was cancelled
}

// podvisor stopping during the wait marks nothing: the next start decides.
func TestConfirmCancelled(t *testing.T) {
	d := &fakeDriver{state: BootState{Pending: true}}
	ctx, cancel := context.WithCancel(context.Background())
	hang := func(ctx context.Context) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}
	_, err := Confirm(ctx, d, hang, time.Hour, newFakeClock())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if len(d.marks) != 0 {
		t.Errorf("marks %q, want none", d.marks)
	}
}

func TestConfirmDriverErrors(t *testing.T) {
	d := &fakeDriver{bootErr: errors.New("no D-Bus")}
	if _, err := Confirm(context.Background(), d, healthy, time.Minute, RealClock); err == nil || !strings.Contains(err.Error(), "fake: reading the boot state: no D-Bus") {
		t.Errorf("err %v", err)
	}
	d = &fakeDriver{state: BootState{Pending: true, Slot: "rootfs.1"}, markGoodEr: errors.New("bootloader refused")}
	if _, err := Confirm(context.Background(), d, healthy, time.Minute, RealClock); err == nil || !strings.Contains(err.Error(), "marking the new system rootfs.1 good: bootloader refused") {
		t.Errorf("err %v", err)
	}
}

func TestOpen(t *testing.T) {
	if _, err := Open(Config{}); !errors.Is(err, ErrNoDriver) {
		t.Errorf("no driver: %v", err)
	}
	if _, err := Open(Config{Driver: "mender"}); err == nil || !strings.Contains(err.Error(), `firmware.driver "mender" is not built into this podvisor`) {
		t.Errorf("unknown driver: %v", err)
	}
	Register("fake", func(Config) (Driver, error) { return &fakeDriver{}, nil })
	defer delete(openers, "fake")
	if d, err := Open(Config{Driver: "fake"}); err != nil || d.Name() != "fake" {
		t.Errorf("fake: %v %v", d, err)
	}
}
