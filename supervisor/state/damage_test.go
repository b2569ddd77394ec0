package state

import (
	"bytes"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// seeded writes a database with a few pods and closes it, checkpointed
// (the daemon's Close checkpoints too), and returns its path.
func seeded(t *testing.T, dir string, pods int) string {
	t.Helper()
	path := filepath.Join(dir, "state.db")
	s, err := OpenOrReplace(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var ins []*lifecycle.Instance
	for i := range pods {
		uid := types.UID(fmt.Sprintf("uid-%d", i))
		ins = append(ins, &lifecycle.Instance{
			Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "default", UID: uid},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Command: []string{strings.Repeat("x", 3000)}}}}},
			Created:    time.Unix(1700000000, 0),
			Containers: []*lifecycle.Container{{Name: "c", Phase: lifecycle.Running, Attempt: 2, RestartCount: 1, InstanceID: string(uid) + "_c_2"}},
		})
	}
	if err := s.Save(ins, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func captureLog() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

func TestOpenOrReplaceKeepsAHealthyDatabase(t *testing.T) {
	path := seeded(t, t.TempDir(), 3)
	log, buf := captureLog()
	s, err := OpenOrReplace(path, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Damaged() != nil || s.Empty() || buf.Len() != 0 {
		t.Fatalf("healthy database treated as damaged: %v empty=%v log=%q", s.Damaged(), s.Empty(), buf)
	}
	if ins, _ := s.Instances(); len(ins) != 3 {
		t.Fatalf("instances = %d, want 3", len(ins))
	}
}

func TestOpenOrReplaceMovesDamagedDatabaseAside(t *testing.T) {
	cases := map[string]func(t *testing.T, path string){
		"truncated to zero": func(t *testing.T, path string) { os.Truncate(path, 0) },
		"truncated mid-file": func(t *testing.T, path string) {
			st, _ := os.Stat(path)
			os.Truncate(path, st.Size()/2+100)
		},
		"junk header": func(t *testing.T, path string) { overwrite(t, path, 0, 100) },
		"junk pages":  func(t *testing.T, path string) { overwrite(t, path, 4096, 3*4096) },
		"WAL without its database": func(t *testing.T, path string) {
			other := seededWAL(t)
			os.Remove(path)
			copyFile(t, other, path+"-wal")
		},
		"WAL of another database": func(t *testing.T, path string) {
			copyFile(t, seededWAL(t), path+"-wal")
		},
		"WAL of a database that is not podvisor's": func(t *testing.T, path string) {
			copyFile(t, foreignWAL(t), path+"-wal")
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			path := seeded(t, t.TempDir(), 40)
			damage(t, path)
			log, buf := captureLog()
			s, err := OpenOrReplace(path, log)
			if err != nil {
				t.Fatalf("OpenOrReplace: %v", err)
			}
			defer s.Close()
			ins, err := s.Instances()
			if err != nil {
				t.Fatalf("the replacement is not usable: %v", err)
			}
			if s.Damaged() == nil {
				t.Fatalf("damage not detected; %d of 40 records read", len(ins))
			}
			if len(ins) != 0 || !s.Empty() {
				t.Fatalf("replacement holds %d records, empty=%v", len(ins), s.Empty())
			}
			d := s.Damaged()
			t.Logf("reason: %s", d.Reason)
			if _, err := os.Stat(d.MovedTo); err != nil {
				t.Fatalf("damaged file not kept: %v", err)
			}
			if !strings.Contains(buf.String(), "level=ERROR") || !strings.Contains(buf.String(), path) || !strings.Contains(buf.String(), "reason=") {
				t.Fatalf("no error-level log line naming the path and the reason: %q", buf)
			}
		})
	}
}

func TestOpenOrReplaceKeepsTheNewestDamagedFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	for i := range KeepDamaged + 2 {
		os.WriteFile(path, []byte("not a database, not at all, really not a database at all"), 0o600)
		os.WriteFile(path+"-wal", []byte("junk"), 0o600)
		log, _ := captureLog()
		s, err := OpenOrReplace(path, log)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if s.Damaged() == nil {
			t.Fatalf("round %d: junk not detected", i)
		}
		s.Close()
		time.Sleep(2 * time.Millisecond) // distinct timestamps
	}
	kept, _ := filepath.Glob(path + ".corrupt-*")
	dbs := 0
	for _, k := range kept {
		if !strings.HasSuffix(k, "-wal") && !strings.HasSuffix(k, "-shm") {
			dbs++
		}
	}
	if dbs != KeepDamaged {
		t.Fatalf("kept %d damaged databases (%v), want %d", dbs, kept, KeepDamaged)
	}
}

func overwrite(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := bytes.Repeat([]byte{0xA5, 0x13, 0x77, 0xFE}, int(n/4))
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

// seededWAL returns the WAL of another database, left behind as a crash
// would leave it.
func seededWAL(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "other.db")
	s, err := OpenOrReplace(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.db.Exec(`PRAGMA wal_autocheckpoint = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`CREATE TABLE other (x BLOB); INSERT INTO other VALUES (randomblob(20000))`); err != nil {
		t.Fatal(err)
	}
	copyFile(t, path+"-wal", filepath.Join(dir, "kept-wal"))
	return filepath.Join(dir, "kept-wal")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCheckOutOfTimeIsNotDamage(t *testing.T) {
	path := seeded(t, t.TempDir(), 3)
	defer func(d time.Duration) { CheckTimeout = d }(CheckTimeout)
	CheckTimeout = time.Nanosecond
	log, buf := captureLog()
	s, err := OpenOrReplace(path, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Damaged() != nil || buf.Len() != 0 {
		t.Fatalf("a healthy database whose check ran out of time was moved aside: %v %q", s.Damaged(), buf)
	}
	if ins, _ := s.Instances(); len(ins) != 3 {
		t.Fatalf("instances = %d, want 3", len(ins))
	}
}

// foreignWAL is the WAL of a SQLite database of another program.
func foreignWAL(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "foreign.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{`PRAGMA wal_autocheckpoint = 0`, `CREATE TABLE notes (x BLOB)`, `INSERT INTO notes VALUES (randomblob(20000))`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, path+"-wal", filepath.Join(dir, "kept-wal"))
	return filepath.Join(dir, "kept-wal")
}
