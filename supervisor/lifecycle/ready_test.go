package lifecycle

import (
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// savedFirst checks the at-most-once rule on one Ready: every Start waits
// for the save of its pod's record, and the record saved names the very
// instance started, so a daemon killed right after the start finds it
// and never starts that attempt again. The harness applies it to every
// Ready of every scenario in this package.
func savedFirst(rd Ready) error {
	saved := map[types.UID]*Instance{}
	for _, in := range rd.Records {
		saved[in.UID()] = in
	}
	for _, uid := range rd.MustSave {
		if saved[uid] == nil {
			return fmt.Errorf("%s must be saved first but its record is not among those saved", uid)
		}
	}
	for _, a := range rd.Actions {
		if a.Kind != Start {
			continue
		}
		if !a.AfterSave || !slices.Contains(rd.MustSave, a.Pod) {
			return fmt.Errorf("start of %s may leave before its record is saved (AfterSave %v, MustSave %v)", a.InstanceID, a.AfterSave, rd.MustSave)
		}
		c := saved[a.Pod].Container(a.Container)
		if c == nil || c.InstanceID != a.InstanceID || c.Attempt != a.Attempt || c.Phase != Starting {
			return fmt.Errorf("the record saved before the start of %s does not name it: %+v", a.InstanceID, c)
		}
	}
	return nil
}

// No step emits a Start whose record is not saved first, even while
// every other change waits for a batched save: the lifecycle's scenarios
// that start containers, each run on a machine that batches saves for a
// minute. (Every other test's harness checks the same on each step.)
func TestEveryStartIsSavedFirst(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(h *harness)
	}{
		{"first start, init containers and a sidecar in order", func(h *harness) {
			h.m.SetDesired([]*v1.Pod{withInit(pod("p", "u", v1.RestartPolicyAlways, "app"), "i1", "side1")})
			h.reconcile()
			h.exit("u", "i1", 0)
			h.reconcile()
		}},
		{"restart at once, then after a backoff", func(h *harness) {
			h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
			h.reconcile()
			h.exit("u", "app", 1)
			h.exit("u", "app", 1)
			h.advance(10 * time.Second)
		}},
		{"a failed creation retried after its backoff", func(h *harness) {
			h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
			start := kinds(h.step(h.now), Start)[0]
			h.observed(h.m.StartFailed("u", "app", start.InstanceID, ErrImagePull, "unreachable", h.now))
			h.advance(10 * time.Second)
		}},
		{"a changed pod replaces its old instance", func(h *harness) {
			h.m.SetDesired([]*v1.Pod{pod("p", "old", v1.RestartPolicyAlways, "app")})
			h.reconcile()
			h.m.SetDesired([]*v1.Pod{pod("p", "new", v1.RestartPolicyAlways, "app")})
			h.reconcile()
			h.exit("old", "app", 143)
		}},
		{"a deleted pod its source still asks for starts again", func(h *harness) {
			h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
			h.reconcile()
			if err := h.m.Delete("u", nil, false, h.now); err != nil {
				h.t.Fatal(err)
			}
			h.reconcile()
			h.exit("u", "app", 143)
		}},
		{"a restored record's crashed container restarts", func(h *harness) {
			h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
			h.reconcile()
			in := roundTrip(h.t, h.m.Instance("u"))
			h.m = NewMachine(h.m.cfg)
			h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
			h.m.Restore(in, h.now)
			h.exit("u", "app", 1)
		}},
		{"a rebuilt record's crashed container restarts", func(h *harness) {
			h.m.Rebuild("u", "default", "p", "", found(), h.now)
			h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
			h.reconcile()
			h.exit("u", "c", 1)
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			h := newHarness(t)
			cfg := DefaultConfig()
			cfg.SaveDelay = time.Minute
			h.m = NewMachine(cfg)
			sc.run(h)
			if h.starts == 0 {
				t.Fatal("the scenario started nothing: it checks nothing")
			}
		})
	}
}

// Changes no action waits on are saved SaveDelay after a Ready first saw
// them, in one write; a Start brings the save forward, with everything
// unsaved in it.
func TestReadyBatchesSavesNoActionWaitsOn(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SaveDelay = 100 * time.Millisecond
	m := NewMachine(cfg)
	m.SetDesired([]*v1.Pod{pod("a", "ua", v1.RestartPolicyNever, "app"), pod("b", "ub", v1.RestartPolicyNever, "app")})
	rd := m.Ready(t0)
	if len(rd.Records) != 2 || !slices.Equal(rd.MustSave, []types.UID{"ua", "ub"}) || rd.Unsaved {
		t.Fatalf("the first starts must save both records first: records %d, must %v, unsaved %v", len(rd.Records), rd.MustSave, rd.Unsaved)
	}
	m.Advance(rd)
	for _, a := range rd.Actions {
		m.Started(a.Pod, a.Container, a.InstanceID, t0)
	}
	rd = m.Ready(t0)
	if len(rd.Records) != 0 || !rd.Unsaved || !rd.NextWake.Equal(t0.Add(100*time.Millisecond)) {
		t.Fatalf("a change nothing waits on must wait for the batch: records %d, unsaved %v, wake %v", len(rd.Records), rd.Unsaved, rd.NextWake)
	}
	m.Advance(rd)
	if rd = m.Ready(t0.Add(99 * time.Millisecond)); len(rd.Records) != 0 {
		t.Fatalf("saved before the batch ended: %d records", len(rd.Records))
	}
	m.Advance(rd)
	rd = m.Ready(t0.Add(100 * time.Millisecond))
	if len(rd.Records) != 2 || len(rd.MustSave) != 0 || rd.Unsaved || !rd.NextWake.IsZero() {
		t.Fatalf("at the end of the batch: records %d, must %v, unsaved %v, wake %v", len(rd.Records), rd.MustSave, rd.Unsaved, rd.NextWake)
	}
	m.Advance(rd)
	if rd = m.Ready(t0.Add(time.Second)); len(rd.Records) != 0 || rd.Unsaved {
		t.Fatalf("saved twice: records %d, unsaved %v", len(rd.Records), rd.Unsaved)
	}
	m.Advance(rd)
	// Pod b ends for good, then pod a is replaced: a's new start takes
	// b's unsaved exit with it.
	at := t0.Add(2 * time.Second)
	m.Exited("ub", "app", Termination{InstanceID: m.Instance("ub").Container("app").InstanceID, FinishedAt: at})
	m.SetDesired([]*v1.Pod{pod("a", "ua2", v1.RestartPolicyNever, "app"), pod("b", "ub", v1.RestartPolicyNever, "app")})
	m.Exited("ua", "app", Termination{InstanceID: m.Instance("ua").Container("app").InstanceID, FinishedAt: at})
	rd = m.Ready(at)
	if got := recordUIDs(rd); !slices.Equal(got, []types.UID{"ua2", "ub"}) || !slices.Equal(rd.Forgotten, []types.UID{"ua"}) ||
		!slices.Equal(rd.MustSave, []types.UID{"ua2"}) {
		t.Fatalf("records %v, forgotten %v, must %v: want the new start and the unsaved exit in one write", got, rd.Forgotten, rd.MustSave)
	}
}

func recordUIDs(rd Ready) []types.UID {
	var out []types.UID
	for _, in := range rd.Records {
		out = append(out, in.UID())
	}
	return out
}

// A Ready names the pods whose status changed since the last one, those
// forgotten included, and Advance acknowledges them.
func TestReadyNamesChangedViews(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("a", "ua", v1.RestartPolicyAlways, "app"), pod("b", "ub", v1.RestartPolicyAlways, "app")})
	h.reconcile()
	rd := h.m.Ready(h.now)
	if !slices.Equal(rd.Changed, []types.UID{"ua", "ub"}) {
		t.Fatalf("changed %v: the starts were acknowledged since the last Ready", rd.Changed)
	}
	h.m.Advance(rd)
	if rd = h.m.Ready(h.now); len(rd.Changed) != 0 {
		t.Fatalf("changed %v with nothing new", rd.Changed)
	}
	h.m.Advance(rd)
	h.m.Probed("ub", "app", h.container("ub", "app").InstanceID, Readiness, true, "", h.now)
	h.m.SetDesired([]*v1.Pod{pod("b", "ub", v1.RestartPolicyAlways, "app")})
	h.reconcile()
	h.m.Exited("ua", "app", Termination{InstanceID: h.container("ua", "app").InstanceID, ExitCode: 143, FinishedAt: h.now})
	rd = h.m.Ready(h.now)
	if !slices.Equal(rd.Changed, []types.UID{"ua"}) || h.m.Instance("ua") != nil {
		t.Fatalf("changed %v: want the forgotten pod", rd.Changed)
	}
}

// Flush hands over every unsaved change, whatever the batching, and
// nothing to do.
func TestFlushSavesEverything(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SaveDelay = time.Hour
	m := NewMachine(cfg)
	m.SetDesired([]*v1.Pod{pod("a", "ua", v1.RestartPolicyAlways, "app")})
	rd := m.Ready(t0)
	m.Advance(rd)
	m.Started("ua", "app", rd.Actions[0].InstanceID, t0)
	if rd = m.Ready(t0); !rd.Unsaved {
		t.Fatal("the start's acknowledgement was saved at once")
	}
	m.Advance(rd)
	rd = m.Flush()
	if got := recordUIDs(rd); !slices.Equal(got, []types.UID{"ua"}) || len(rd.Actions) != 0 {
		t.Fatalf("flush: records %v, actions %v", got, rd.Actions)
	}
	m.Advance(rd)
	if rd = m.Ready(t0); rd.Unsaved || len(rd.Records) != 0 {
		t.Fatalf("after the flush: unsaved %v, records %d", rd.Unsaved, len(rd.Records))
	}
}
