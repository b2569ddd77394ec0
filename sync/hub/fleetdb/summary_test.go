package fleetdb

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sync/protocol"

	"github.com/podvisor/podvisor/test/pgtest"
)

func statusPod(name string, ready bool, phase v1.PodPhase, restarts int32, waiting string) *v1.Pod {
	st := v1.ConditionFalse
	if ready {
		st = v1.ConditionTrue
	}
	cs := v1.ContainerStatus{Name: "app", RestartCount: restarts, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	if waiting != "" {
		cs.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: waiting}}
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
		Annotations: map[string]string{AnnotationScheduled: "true"}},
		Status: v1.PodStatus{Phase: phase, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: st}},
			ContainerStatuses: []v1.ContainerStatus{cs}}}
}

func summaries(t *testing.T, f *Fleet) map[types.NamespacedName]PodSummary {
	t.Helper()
	ss, err := f.ScheduledSummaries()
	if err != nil {
		t.Fatal(err)
	}
	out := map[types.NamespacedName]PodSummary{}
	for _, s := range ss {
		if s.Device != "dev" {
			t.Errorf("summary %+v of another device", s)
		}
		out[s.Key] = s
	}
	return out
}

// The summary columns follow each stored status: ReadySince is the hub's
// time of the first report that said Ready after one that did not, kept
// while Ready stays; a batch says when it changed a hub pod's summary.
func TestMirrorSummaryFollowsStatuses(t *testing.T) {
	pgtest.EachStore(t, testMirrorSummaryFollowsStatuses)
}

func testMirrorSummaryFollowsStatuses(t *testing.T) {
	f := testFleet(t, "dev")
	t0 := time.Unix(1700000000, 0)
	seq := int64(0)
	send := func(at time.Time, items ...protocol.StatusItem) StatusStored {
		t.Helper()
		b := &protocol.StatusBatch{Device: "dev", Epoch: "e1", After: seq}
		for _, it := range items {
			seq++
			it.Seq = seq
			b.Items = append(b.Items, it)
		}
		r, err := f.StoreStatus(b, at)
		if err != nil || r.Gap {
			t.Fatalf("batch: %+v, %v", r, err)
		}
		return r
	}
	web := types.NamespacedName{Namespace: "default", Name: "web"}
	item := func(p *v1.Pod) protocol.StatusItem { return protocol.StatusItem{Key: "default/" + p.Name, Pod: p} }

	file := statusPod("file", true, v1.PodRunning, 0, "")
	file.Annotations = nil // a file pod: no summary is read
	if r := send(t0, item(statusPod("web", false, v1.PodPending, 0, "ContainerCreating")), item(file)); !r.HubPodsChanged {
		t.Error("a first report of a hub pod changed nothing")
	}
	s := summaries(t, f)
	if len(s) != 1 || s[web].Ready || s[web].Phase != v1.PodPending || s[web].Failure != "" {
		t.Fatalf("summaries %+v, want web Pending, not ready, no failure", s)
	}
	send(t0.Add(time.Second), item(statusPod("web", true, v1.PodRunning, 0, "")))
	if r := send(t0.Add(5*time.Second), item(statusPod("web", true, v1.PodRunning, 1, ""))); r.HubPodsChanged {
		t.Error("a restart count alone changed the hub pod's summary")
	}
	s = summaries(t, f)
	if !s[web].Ready || !s[web].ReadySince.Equal(t0.Add(time.Second)) || s[web].Restarts != 1 {
		t.Fatalf("web %+v, want Ready since t0+1s with 1 restart", s[web])
	}
	if r := send(t0.Add(9*time.Second), item(statusPod("web", false, v1.PodRunning, 4, "CrashLoopBackOff"))); !r.HubPodsChanged {
		t.Error("a crash loop did not change the summary")
	}
	s = summaries(t, f)
	if s[web].Ready || !s[web].ReadySince.IsZero() || s[web].Failure != "CrashLoopBackOff" || s[web].Restarts != 4 {
		t.Fatalf("web %+v, want not ready, CrashLoopBackOff, 4 restarts", s[web])
	}
	send(t0.Add(20*time.Second), item(statusPod("web", true, v1.PodRunning, 4, "")))
	if s = summaries(t, f); !s[web].ReadySince.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("web ready since %v, want the report of t0+20s", s[web].ReadySince)
	}
	// A file pod's status asks for no pass.
	file.Status.Phase = v1.PodFailed
	if r := send(t0.Add(21*time.Second), item(file)); r.HubPodsChanged {
		t.Error("a file pod's status asked for a pass")
	}
}

// The migration that adds the summary columns fills them from the
// mirrors stored before: Ready, phase, restarts of every container and
// the first failure reason, Ready since the migration, and whether the
// hub's scheduler placed the pod.
func TestMirrorSummaryMigrationBackfills(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate(db, sqldb.SQLite, fleetMigrations[:4]); err != nil {
		t.Fatal(err)
	}
	crashing := statusPod("crash", false, v1.PodRunning, 3, "")
	crashing.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "init", RestartCount: 2,
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: "Completed"}}}}
	crashing.Status.ContainerStatuses = append(crashing.Status.ContainerStatuses, v1.ContainerStatus{Name: "side",
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}})
	for _, p := range []*v1.Pod{statusPod("web", true, v1.PodRunning, 1, ""), crashing, {ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "default"}}} {
		raw, _ := json.Marshal(p)
		if _, err := db.Exec(`INSERT INTO mirrors (device, key, seq, pod) VALUES ('dev', ?, 1, ?)`, "default/"+p.Name, raw); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	before := time.Now().Add(-time.Second)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := summaries(t, f)
	web, crash, bare := s[types.NamespacedName{Namespace: "default", Name: "web"}], s[types.NamespacedName{Namespace: "default", Name: "crash"}], s[types.NamespacedName{Namespace: "default", Name: "bare"}]
	if !web.Ready || web.Phase != v1.PodRunning || web.Restarts != 1 || web.ReadySince.Before(before) {
		t.Errorf("web %+v, want Ready since the migration, Running, 1 restart", web)
	}
	if crash.Ready || crash.Restarts != 5 || crash.Failure != "Error" {
		t.Errorf("crash %+v, want not ready, 5 restarts, failure Error", crash)
	}
	if _, listed := s[types.NamespacedName{Namespace: "default", Name: "bare"}]; listed || bare.Ready {
		t.Errorf("bare %+v: a pod the hub did not schedule has no summary read", bare)
	}
}
