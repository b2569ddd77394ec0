package agent

import (
	"strings"
	"testing"
	"time"
)

func cand(name, state string, tries int, lastErr, broken string) *Candidate {
	return &Candidate{Name: name, Binary: "/d/agent/slots/" + name + "/podvisor", Broken: broken,
		Record: Record{Version: strings.Split(name, "-")[0], State: state, TriesLeft: tries, LastError: lastErr}}
}

// The launcher's decision for every state of current and previous.
func TestDecide(t *testing.T) {
	const factory = "/usr/bin/podvisor"
	x := func(state string, tries int) *Candidate { return cand("v1.3.0-aaaaaaaa", state, tries, "", "") }
	y := cand("v1.2.0-bbbbbbbb", StateCommitted, 0, "", "")
	for _, c := range []struct {
		name           string
		self           string
		cur, prev      *Candidate
		want           Launch
		reasonContains string
	}{
		{name: "no slot: the packaged binary runs itself", self: factory, want: Launch{Action: Continue}},
		{name: "committed: exec it", self: factory, cur: x(StateCommitted, 0), prev: y,
			want: Launch{Action: Exec, Path: x("", 0).Binary}},
		{name: "already current: continue", self: x("", 0).Binary, cur: x(StateTrial, 1), prev: y, want: Launch{Action: Continue}},
		{name: "trial with tries: count and exec", self: factory, cur: x(StateTrial, 2), prev: y,
			want: Launch{Action: Exec, Path: x("", 0).Binary, Decrement: true}},
		{name: "trial out of tries: back to previous", self: factory, cur: x(StateTrial, 0), prev: y,
			want: Launch{Action: Exec, Path: y.Binary}, reasonContains: "v1.3.0 started 2 times without becoming ready"},
		{name: "trial out of tries, its error recorded", self: factory, cur: cand("v1.3.0-aaaaaaaa", StateTrial, 0, "hub: dial tcp: refused", ""), prev: y,
			want: Launch{Action: Exec, Path: y.Binary}, reasonContains: "without becoming ready: hub: dial tcp: refused"},
		{name: "trial out of tries, no previous: the factory binary", self: factory, cur: x(StateTrial, 0),
			want: Launch{Action: Continue}, reasonContains: "without becoming ready"},
		{name: "broken current: back to previous", self: factory, cur: cand("v1.3.0-aaaaaaaa", StateTrial, 2, "", "podvisor is 10 bytes, slot.json says 20"), prev: y,
			want: Launch{Action: Exec, Path: y.Binary}, reasonContains: "cannot start: podvisor is 10 bytes"},
		{name: "broken current, broken previous: the factory binary", self: factory, cur: cand("v1.3.0-aaaaaaaa", StateCommitted, 0, "", "no such file"),
			prev: cand("v1.2.0-bbbbbbbb", StateCommitted, 0, "", "no such file"), want: Launch{Action: Continue}, reasonContains: "cannot start"},
		{name: "a rollback cut short is finished", self: factory, cur: cand("v1.3.0-aaaaaaaa", StateFailed, 0, "v1.3.0: not ready within 5m0s", ""), prev: y,
			want: Launch{Action: Exec, Path: y.Binary}, reasonContains: "not ready within 5m0s"},
		{name: "previous not committed is no way back", self: factory, cur: x(StateTrial, 0), prev: cand("v1.2.0-bbbbbbbb", StateTrial, 2, "", ""),
			want: Launch{Action: Continue}, reasonContains: "without becoming ready"},
		{name: "the previous version relaunched itself after the rollback", self: y.Binary, cur: x(StateTrial, 0), prev: y,
			want: Launch{Action: Continue}, reasonContains: "without becoming ready"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Decide(c.self, c.cur, c.prev)
			reason := got.RollBack
			got.RollBack = ""
			if got != c.want {
				t.Fatalf("Decide = %+v, want %+v", got, c.want)
			}
			if (c.reasonContains == "") != (reason == "") || !strings.Contains(reason, c.reasonContains) {
				t.Fatalf("rollback reason %q, want one containing %q", reason, c.reasonContains)
			}
		})
	}
}

// The commit gate's verdict over time, on a fake clock.
func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	started := t0.Add(-time.Hour + 123456789*time.Nanosecond)
	web := Container{PodUID: "u1", Pod: "default/web", Name: "nginx", ID: "podvisor://u1-nginx-1", StartedAt: started}
	restarted := web
	restarted.ID, restarted.StartedAt = "podvisor://u1-nginx-2", t0
	base := GateFacts{Now: t0, Deadline: t0.Add(5 * time.Minute), Timeout: 5 * time.Minute, Handoff: []Container{web}}
	for _, c := range []struct {
		name   string
		edit   func(f *GateFacts)
		done   bool
		reason string
	}{
		{"not ready yet: wait", func(f *GateFacts) {}, false, ""},
		{"ready, pods adopted, no hub: commit", func(f *GateFacts) { f.Ready, f.Running = true, []Container{web} }, true, ""},
		{"ready, a pod restarted: roll back at once", func(f *GateFacts) { f.Ready, f.Running = true, []Container{restarted} }, true,
			"container nginx of pod default/web was restarted (podvisor://u1-nginx-1, now podvisor://u1-nginx-2)"},
		{"ready, a pod not adopted: roll back", func(f *GateFacts) { f.Ready = true }, true, "container nginx of pod default/web was not adopted"},
		{"ready, hub not reached yet: wait", func(f *GateFacts) { f.Ready, f.Running, f.HubNeeded = true, []Container{web}, true }, false, ""},
		{"ready, hub reached: commit", func(f *GateFacts) { f.Ready, f.Running, f.HubNeeded, f.HubReached = true, []Container{web}, true, true }, true, ""},
		{"hub reached before ready: wait", func(f *GateFacts) { f.HubNeeded, f.HubReached = true, true }, false, ""},
		{"one second before the deadline: wait", func(f *GateFacts) { f.Now = f.Deadline.Add(-time.Second) }, false, ""},
		{"deadline, not ready", func(f *GateFacts) { f.Now = f.Deadline }, true, "not ready within 5m0s"},
		{"deadline, ready, no hub", func(f *GateFacts) {
			f.Now, f.Ready, f.Running, f.HubNeeded = f.Deadline, true, []Container{web}, true
		}, true, "no heartbeat receipt from the hub within 5m0s"},
		{"start time shown to the second: the same container", func(f *GateFacts) {
			same := web
			same.StartedAt = started.Truncate(time.Second)
			f.Ready, f.Running = true, []Container{same}
		}, true, ""},
		{"no handoff (after a reboot): ready is enough", func(f *GateFacts) { f.Ready, f.Handoff = true, nil }, true, ""},
		{"a container that completed by itself after the switch: commit", func(f *GateFacts) {
			done := web
			done.Ended = "Completed"
			f.Ready, f.Running = true, []Container{done}
		}, true, ""},
		{"a container that crashed by itself and was restarted by its policy: commit", func(f *GateFacts) {
			crashed := web
			crashed.Ended = "Error"
			f.Ready, f.Running = true, []Container{crashed, restarted}
		}, true, ""},
		{"a container whose state was lost, restarted: roll back", func(f *GateFacts) {
			lost := web
			lost.Ended = "ContainerStatusUnknown"
			f.Ready, f.Running = true, []Container{lost, restarted}
		}, true, "container nginx of pod default/web was restarted (podvisor://u1-nginx-1, now podvisor://u1-nginx-2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := base
			c.edit(&f)
			done, reason := Judge(f)
			if done != c.done || reason != c.reason {
				t.Fatalf("Judge = %v %q, want %v %q", done, reason, c.done, c.reason)
			}
		})
	}
}

func TestArchName(t *testing.T) {
	for _, c := range []struct{ goarch, goarm, want string }{
		{"amd64", "", "amd64"}, {"arm64", "", "arm64"}, {"arm", "7", "armv7"}, {"arm", "6", "armv6"},
		{"arm", "7,softfloat", "armv7"}, {"arm", "", "armv7"}, {"riscv64", "", "riscv64"}, {"386", "", "386"},
	} {
		if got := archName(c.goarch, c.goarm); got != c.want {
			t.Errorf("archName(%s, %q) = %s, want %s", c.goarch, c.goarm, got, c.want)
		}
	}
}
