package state

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// An operator's reader that holds a read transaction open stalls the
// checkpoints, not the daemon's writes: the WAL grows while it reads, and
// once it is done the WAL starts over and is cut back to WALSizeLimit.
func TestLongReadTransactionStallsCheckpointsNotWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := &lifecycle.Instance{
		Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1",
			Annotations: map[string]string{"podvisor.io/source": "file", "big": strings.Repeat("x", 64<<10)}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "host"}}}},
		Created:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Containers: []*lifecycle.Container{{Name: "c", Phase: lifecycle.Running}},
	}
	save := func() {
		t.Helper()
		in.Containers[0].RestartCount++
		if err := s.Save([]*lifecycle.Instance{in}, nil); err != nil {
			t.Fatalf("save %d under the reader: %v", in.Containers[0].RestartCount, err)
		}
	}
	save()

	reader, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	ctx := context.Background()
	conn, err := reader.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n int
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM pods`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the reader's count: %d, %v", n, err)
	}
	for walSize(t, path) < WALSizeLimit+4<<20 {
		save()
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	// The first save after the reader checkpoints the whole WAL, the
	// next starts it over.
	save()
	save()
	if size := walSize(t, path); size > WALSizeLimit {
		t.Fatalf("WAL %d bytes after the reader let go, want at most %d", size, WALSizeLimit)
	}
	got, err := s.Instances()
	if err != nil || len(got) != 1 || got[0].Containers[0].RestartCount != in.Containers[0].RestartCount {
		t.Fatalf("after the reader: %v, %v; want restartCount %d", got, err, in.Containers[0].RestartCount)
	}
}

func walSize(t *testing.T, db string) int64 {
	t.Helper()
	st, err := os.Stat(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
