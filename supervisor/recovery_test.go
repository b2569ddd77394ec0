package supervisor

import (
	"testing"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

func TestRecoverInstance(t *testing.T) {
	rec := func(id string, attempt int, phase lifecycle.ContainerPhase) *lifecycle.Container {
		return &lifecycle.Container{Name: "c", InstanceID: id, Attempt: attempt, Phase: phase}
	}
	exit := &runtime.Exit{InstanceID: "u_c_2", ExitCode: 3}
	for _, tc := range []struct {
		name     string
		found    runtime.Found
		podKnown bool
		rec      *lifecycle.Container
		want     recovery
	}{
		{"pod no record knows", runtime.Found{InstanceID: "u_c_1", Attempt: 1, Alive: true}, false, nil, recoverUnrecorded},
		{"pod no record knows, finished", runtime.Found{InstanceID: "u_c_1", Attempt: 1}, false, nil, recoverUnrecorded},
		{"container its pod's record lacks, alive", runtime.Found{InstanceID: "u_x_1", Attempt: 1, Alive: true}, true, nil, recoverOrphan},
		{"container its pod's record lacks, finished", runtime.Found{InstanceID: "u_x_1", Attempt: 1}, true, nil, recoverRemove},
		{"alive, the recorded attempt", runtime.Found{InstanceID: "u_c_2", Attempt: 2, Alive: true}, true, rec("u_c_2", 2, lifecycle.Running), recoverAdopt},
		{"alive, a later attempt (forked, not yet saved)", runtime.Found{InstanceID: "u_c_3", Attempt: 3, Alive: true}, true, rec("u_c_2", 2, lifecycle.Running), recoverAdopt},
		{"alive, an older attempt", runtime.Found{InstanceID: "u_c_1", Attempt: 1, Alive: true}, true, rec("u_c_2", 2, lifecycle.Running), recoverKillSuperseded},
		{"ended while away, running by the record", runtime.Found{InstanceID: "u_c_2", Attempt: 2, Exit: exit}, true, rec("u_c_2", 2, lifecycle.Running), recoverReportExit},
		{"ended while away, starting by the record", runtime.Found{InstanceID: "u_c_2", Attempt: 2, Exit: exit}, true, rec("u_c_2", 2, lifecycle.Starting), recoverReportExit},
		{"finished, its end already recorded", runtime.Found{InstanceID: "u_c_2", Attempt: 2, Exit: exit}, true, rec("u_c_2", 2, lifecycle.Exited), recoverNothing},
		{"finished, an older attempt", runtime.Found{InstanceID: "u_c_1", Attempt: 1}, true, rec("u_c_2", 2, lifecycle.Running), recoverNothing},
	} {
		if got := recoverInstance(tc.found, tc.podKnown, tc.rec); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReconnectInstance(t *testing.T) {
	running := &lifecycle.Container{Name: "c", InstanceID: "u_c_2", Attempt: 2, Phase: lifecycle.Running}
	exited := &lifecycle.Container{Name: "c", InstanceID: "u_c_2", Attempt: 2, Phase: lifecycle.Exited}
	exit := &runtime.Exit{InstanceID: "u_c_2", ExitCode: 1}
	for _, tc := range []struct {
		name  string
		found runtime.Found
		rec   *lifecycle.Container
		want  recovery
	}{
		{"already followed", runtime.Found{InstanceID: "u_c_2", Alive: true, Followed: true}, running, recoverNothing},
		{"no record, alive", runtime.Found{InstanceID: "u_c_2", Alive: true}, nil, recoverOrphan},
		{"no record, finished", runtime.Found{InstanceID: "u_c_2"}, nil, recoverRemove},
		{"the recorded instance, alive", runtime.Found{InstanceID: "u_c_2", Attempt: 2, Alive: true}, running, recoverAdopt},
		{"the recorded instance, ended while away", runtime.Found{InstanceID: "u_c_2", Attempt: 2, Exit: exit}, running, recoverAdopt},
		{"the recorded instance, no trace of its end", runtime.Found{InstanceID: "u_c_2", Attempt: 2}, running, recoverDiscard},
		{"another instance, alive", runtime.Found{InstanceID: "u_c_1", Attempt: 1, Alive: true}, running, recoverKillSuperseded},
		{"the recorded instance, alive, but the record has it ended", runtime.Found{InstanceID: "u_c_2", Attempt: 2, Alive: true}, exited, recoverKillSuperseded},
		{"another instance, finished", runtime.Found{InstanceID: "u_c_1", Attempt: 1, Exit: exit}, running, recoverDiscard},
	} {
		if got := reconnectInstance(tc.found, tc.rec); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUntracedAndRebuildable(t *testing.T) {
	found := map[string]bool{"u_a_1": true}
	for _, tc := range []struct {
		c    lifecycle.Container
		want bool
	}{
		{lifecycle.Container{InstanceID: "u_a_1", Phase: lifecycle.Running}, false}, // held
		{lifecycle.Container{InstanceID: "u_b_1", Phase: lifecycle.Running}, true},
		{lifecycle.Container{InstanceID: "u_b_1", Phase: lifecycle.Starting}, true},
		{lifecycle.Container{InstanceID: "u_b_1", Phase: lifecycle.Exited}, false}, // its end is recorded
		{lifecycle.Container{Phase: lifecycle.Waiting}, false},
	} {
		if got := untraced(&tc.c, found); got != tc.want {
			t.Errorf("untraced(%s %s) = %v, want %v", tc.c.InstanceID, tc.c.Phase, got, tc.want)
		}
	}
	alive := []lifecycle.Found{{InstanceID: "u_a_1"}, {InstanceID: "u_a_2", Alive: true}}
	finished := []lifecycle.Found{{InstanceID: "u_a_1"}}
	for _, tc := range []struct {
		name  string
		found []lifecycle.Found
		lost  bool
		want  bool
	}{
		{"something runs", alive, false, true},
		{"nothing runs, records intact: leftovers", finished, false, false},
		{"nothing runs, records lost: history", finished, true, true},
	} {
		if got := rebuildable(tc.found, tc.lost); got != tc.want {
			t.Errorf("rebuildable, %s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
