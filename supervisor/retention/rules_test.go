package retention

import (
	"slices"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

func TestStaleInstancesAndLogs(t *testing.T) {
	kept := []runtime.Kept{{InstanceID: "u_c_0"}, {InstanceID: "u_c_1"}, {InstanceID: "u_c_2"}, {InstanceID: "u_c_3"}, {InstanceID: "junk"}}
	for _, tc := range []struct {
		keepFrom int
		want     []string
	}{
		{keepFrom: 0, want: nil},
		{keepFrom: 2, want: []string{"u_c_0", "u_c_1"}},
		{keepFrom: 9, want: []string{"u_c_0", "u_c_1", "u_c_2", "u_c_3"}}, // never an unparsable ID
	} {
		if got := staleInstances(kept, tc.keepFrom); !slices.Equal(got, tc.want) {
			t.Errorf("staleInstances(keepFrom %d) = %v, want %v", tc.keepFrom, got, tc.want)
		}
	}
	logs := []string{"/l/c/0.log", "/l/c/0.log.1", "/l/c/1.log", "/l/c/2.log", "/l/c/10.log", "/l/c/x.log", "/l/c/nodot"}
	if got, want := staleLogs(logs, 2), []string{"/l/c/0.log", "/l/c/0.log.1", "/l/c/1.log"}; !slices.Equal(got, want) {
		t.Errorf("staleLogs = %v, want %v", got, want)
	}
}

func TestDeviceGCCandidates(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC) }
	kept := []runtime.Kept{
		{InstanceID: "a_c_2", Finished: at(5)}, // a/c's newest: kept
		{InstanceID: "a_c_1", Finished: at(3)},
		{InstanceID: "a_c_0", Finished: at(1)},
		{InstanceID: "b_c_0", Finished: at(0)}, // b/c's only one: kept
		{InstanceID: "a_d_0"},                  // running: not finished
		{InstanceID: "c_c_0", Finished: at(2)},
		{InstanceID: "c_c_1", Finished: at(4)}, // c/c's newest
	}
	ids := func(ks []runtime.Kept) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.InstanceID)
		}
		return out
	}
	for _, tc := range []struct {
		max    int
		want   []string
		excess int
	}{
		{max: 0, want: nil, excess: 0},  // no bound
		{max: 6, want: nil, excess: 0},  // six finished: within it
		{max: 10, want: nil, excess: 0}, // well within it
		{max: 4, want: []string{"a_c_0", "c_c_0", "a_c_1"}, excess: 2},
		{max: 1, want: []string{"a_c_0", "c_c_0", "a_c_1"}, excess: 5}, // more than can go: the newest stay
	} {
		got, excess := deviceGCCandidates(kept, tc.max)
		if !slices.Equal(ids(got), tc.want) || excess != tc.excess {
			t.Errorf("max %d: %v (excess %d), want %v (excess %d)", tc.max, ids(got), excess, tc.want, tc.excess)
		}
	}
}
