package state

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

func TestSaveLoadForget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := &lifecycle.Instance{
		Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1",
			Annotations: map[string]string{"podvisor.io/source": "file"}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "host"}}}},
		Created: now,
		Containers: []*lifecycle.Container{{Name: "c", Phase: lifecycle.Exited, Attempt: 3, RestartCount: 2,
			InstanceID: "u1_c_3", StartedAt: now,
			Current: &lifecycle.Termination{InstanceID: "u1_c_3", ExitCode: 4, Reason: "Error", FinishedAt: now.Add(time.Second)},
			Last:    &lifecycle.Termination{InstanceID: "u1_c_2", ExitCode: 1, Reason: "Error"}}},
	}
	if err := s.Save([]*lifecycle.Instance{in}, nil); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(path) // reopening must not re-run migrations
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Instances()
	if err != nil || len(got) != 1 {
		t.Fatalf("instances = %v, %v", got, err)
	}
	c := got[0].Containers[0]
	if got[0].UID() != "u1" || c.RestartCount != 2 || c.Attempt != 3 || c.Current.ExitCode != 4 || c.Last.InstanceID != "u1_c_2" {
		t.Fatalf("round trip lost data: %+v %+v", got[0], c)
	}
	hist, err := s.ContainerInstances("u1")
	if err != nil || len(hist) != 1 || hist[0].ExitCode == nil || *hist[0].ExitCode != 4 {
		t.Fatalf("history = %+v, %v", hist, err)
	}
	if err := s.Save(nil, []types.UID{"u1"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Instances(); len(got) != 0 {
		t.Fatalf("forgotten instance still stored: %v", got)
	}
	if hist, _ := s.ContainerInstances("u1"); len(hist) != 0 {
		t.Fatalf("forgotten history still stored: %v", hist)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// A newer release whose migrations were only additive: this one
	// runs on (a self-update's rollback needs it).
	s.db.Exec(`PRAGMA user_version = 99`)
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatalf("a database a newer podvisor only added to: %v", err)
	}
	// One of its migrations was not: refused.
	s.db.Exec(`UPDATE schema_floor SET floor = 99 WHERE name = 'state'`)
	s.Close()
	if _, err := Open(path); err == nil {
		t.Fatal("opened a database from a newer podvisor")
	}
}

func TestNewerSchemaIsRefusedNotMovedAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.db.Exec(`PRAGMA user_version = 99`)
	s.db.Exec(`UPDATE schema_floor SET floor = 99 WHERE name = 'state'`)
	s.Close()
	if _, err := OpenOrReplace(path, slog.New(slog.DiscardHandler)); !errors.Is(err, sqldb.ErrNewerSchema) {
		t.Fatalf("err = %v, want ErrNewerSchema", err)
	}
	if moved, _ := filepath.Glob(path + ".corrupt-*"); len(moved) != 0 {
		t.Fatalf("a newer database was moved aside: %v", moved)
	}
}
