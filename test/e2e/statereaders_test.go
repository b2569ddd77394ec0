package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	_ "modernc.org/sqlite" // the Go driver's readers
)

// readFor is how long the readers run against the churning daemon.
const readFor = 50 * time.Second

// Operators read state.db with sqlite3 and back it up while the daemon
// runs, read-only or not. None of that may crash the daemon (a -shm
// truncated under its mapping is a SIGBUS), make its writes fail, or lose
// what it wrote: here readers of every kind open, read and close in loops
// for most of a minute, one of them holding long read transactions, while
// 20 pods crash-loop on a loaded machine and every restart is written to
// the pods and outbox tables.
func TestStateDatabaseReadersWhileDaemonChurns(t *testing.T) {
	sqlite3, err := exec.LookPath("sqlite3")
	if err != nil {
		prerequisite(t, "the sqlite3 command (Debian package sqlite3): %v", err)
	}
	d := newDaemon(t)
	// A hub that never answers: every status waits in the outbox.
	d.withConfig("backoff: {initial: 100ms, max: 300ms}\nhub: {url: \"mqtt://" + freeLoopback(t) + "\", allowUnsigned: true}\n")
	d.start()
	settle := filepath.Join(d.dir, "settle")
	const pods = 20
	names := make([]string, pods)
	for i := range names {
		names[i] = fmt.Sprintf("crash%02d", i)
		script := fmt.Sprintf("[ -e %s ] && { touch %s/%s.settled; exec sleep 1000; }; exit 1", settle, d.dir, names[i])
		d.write(names[i]+".yaml", processPod(names[i], "Always", 1, script))
	}
	db := filepath.Join(d.data, "state.db")
	for _, n := range names {
		d.waitPod(n, 30*time.Second, func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > 0
		})
	}
	pid := d.cmd.Process.Pid
	if !holdsWALIndex(t, pid, db) {
		t.Errorf("the daemon holds no lock on %s-shm: the next process to open the database truncates it under the daemon's mapping", db)
	}

	stopSpin := spinners(t, 2)
	r := &readers{t: t, db: db, sqlite3: sqlite3, backups: t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	r.run(ctx)
	t.Cleanup(func() { cancel(); r.wait() }) // before the daemon's cleanup
	var maxWAL int64
	deadline := time.Now().Add(readFor)
	for time.Now().Before(deadline) && !exited(pid) {
		if st, err := os.Stat(db + "-wal"); err == nil && st.Size() > maxWAL {
			maxWAL = st.Size()
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopSpin()
	if exited(pid) {
		cancel()
		r.wait()
		t.Fatalf("the daemon died under the readers:\n%s", d.log)
	}

	// The churn ends: every pod runs from its next restart on, and its
	// count stays put (an instance that saw no settle file still exits);
	// the readers go on until the records are in.
	must(t, os.WriteFile(settle, nil, 0o644))
	want := map[string]int32{}
	for _, n := range names {
		waitForLong(t, 30*time.Second, n+" settled", func() bool { return exists(filepath.Join(d.dir, n+".settled")) })
		p := d.waitPod(n, 30*time.Second, running)
		want["default/"+n] = p.Status.ContainerStatuses[0].RestartCount
	}
	waitForValue(t, 20*time.Second, "every pod's restart count in the pods and outbox tables",
		func() string { return recordsDiff(db, want) + deletedFiles(pid) }, func(s string) bool { return s == "" })
	cancel()
	r.wait()
	t.Logf("in %v: %s; WAL at most %d KiB", readFor, r, maxWAL>>10)
	if !holdsWALIndex(t, pid, db) {
		t.Errorf("the daemon lost its lock on %s-shm", db)
	}
	if exited(pid) {
		t.Fatalf("the daemon died:\n%s", d.log)
	}
	// A failed write (saving state, queueing statuses for the hub) is
	// logged at error level.
	for _, line := range strings.Split(d.log.String(), "\n") {
		if strings.Contains(line, "level=ERROR") || strings.Contains(line, "fatal error") {
			t.Fatalf("the daemon logged %q:\n%s", line, d.log)
		}
	}
	r.check()

	// What the daemon wrote is on disk, not in a WAL some reader deleted
	// or in memory: killed, it leaves a sound file with every record.
	d.stop(syscall.SIGKILL)
	if out := sqliteOut(t, sqlite3, db, "PRAGMA integrity_check;"); out != "ok" {
		t.Fatalf("integrity_check after the daemon was killed: %s", out)
	}
	if diff := recordsDiff(db, want); diff != "" {
		t.Fatalf("after the daemon was killed: %s", diff)
	}
}

// readers open, read and close state.db in loops, each kind in its own
// goroutine, until their context ends.
type readers struct {
	t       *testing.T
	db      string
	sqlite3 string
	backups string

	wg     sync.WaitGroup
	mu     sync.Mutex
	counts map[string]*atomic.Int64
	errs   []string
	order  []string
}

func (r *readers) run(ctx context.Context) {
	r.counts = map[string]*atomic.Int64{}
	kinds := []struct {
		name string
		read func(ctx context.Context, n int64) error
	}{
		{"go mode=ro", func(context.Context, int64) error { return r.goRead("ro") }},
		{"go mode=rw", func(context.Context, int64) error { return r.goRead("rw") }},
		{"sqlite3 -readonly", func(context.Context, int64) error { return r.cliRead("-readonly") }},
		{"sqlite3 read-write", func(context.Context, int64) error { return r.cliRead() }},
		{"sqlite3 -readonly .backup", r.backup},
		{"15 s read transaction", r.longRead},
	}
	for _, k := range kinds {
		n := &atomic.Int64{}
		r.counts[k.name], r.order = n, append(r.order, k.name)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for ctx.Err() == nil {
				if err := k.read(ctx, n.Load()); err != nil {
					r.mu.Lock()
					r.errs = append(r.errs, k.name+": "+err.Error())
					r.mu.Unlock()
				}
				n.Add(1)
				time.Sleep(5 * time.Millisecond) // a pace, not a wait
			}
		}()
	}
}

func (r *readers) wait() { r.wg.Wait() }

func (r *readers) String() string {
	var parts []string
	for _, k := range r.order {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, r.counts[k].Load()))
	}
	return strings.Join(parts, ", ")
}

// check fails the test on any reader's error, or a kind of reader that
// hardly ran.
func (r *readers) check() {
	r.t.Helper()
	if len(r.errs) > 0 {
		r.t.Fatalf("%d reads failed, first: %s", len(r.errs), strings.Join(r.errs[:min(5, len(r.errs))], "\n"))
	}
	for _, k := range r.order {
		if n := r.counts[k].Load(); n < 2 {
			r.t.Fatalf("%s ran %d times", k, n)
		}
	}
}

// goRead is the Go driver's open, query, close, as a tool polling the
// database does.
func (r *readers) goRead(mode string) error {
	db, err := sql.Open("sqlite", "file:"+r.db+"?mode="+mode+"&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	var n int
	return db.QueryRow(`SELECT count(*) FROM pods`).Scan(&n)
}

// cliRead is an operator's sqlite3 query.
func (r *readers) cliRead(flags ...string) error {
	args := append(flags, "-cmd", ".timeout 5000", r.db, "SELECT count(*) FROM pods;")
	out, err := exec.Command(r.sqlite3, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// backup is sqlite3's online backup as docs/operations.md gives it,
// every other second, and the copy must be whole.
func (r *readers) backup(ctx context.Context, n int64) error {
	dst := filepath.Join(r.backups, "state.db")
	os.Remove(dst)
	out, err := exec.Command(r.sqlite3, "-readonly", "-cmd", ".timeout 5000", r.db, ".backup '"+dst+"'").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	out, err = exec.Command(r.sqlite3, dst, "PRAGMA integrity_check; SELECT count(*) FROM pods;").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok\n") {
		return fmt.Errorf("the backup: %v: %s", err, out)
	}
	pause(ctx, 2*time.Second)
	return nil
}

// longRead holds a read transaction for 15 s: the daemon's writes go on,
// and its checkpoints wait.
func (r *readers) longRead(ctx context.Context, _ int64) error {
	db, err := sql.Open("sqlite", "file:"+r.db+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var n int
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		return err
	}
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM pods`).Scan(&n); err != nil {
		return err
	}
	pause(ctx, 15*time.Second)
	if _, err = conn.ExecContext(context.Background(), `COMMIT`); err != nil {
		return err
	}
	pause(ctx, 10*time.Second) // checkpoints catch up
	return nil
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// spinners load the machine with n busy loops until the returned func
// (or the test's end) stops them.
func spinners(t *testing.T, n int) func() {
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		must(t, cmd.Start())
		cmds = append(cmds, cmd)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, c := range cmds {
				c.Process.Kill()
				c.Wait()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// recordsDiff says how the pods table's restart counts and the outbox's
// newest status of each pod differ from want ("" when they match).
func recordsDiff(path string, want map[string]int32) string {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return err.Error()
	}
	defer db.Close()
	got := map[string]string{}
	rows, err := db.Query(`SELECT namespace || '/' || name, record FROM pods`)
	if err != nil {
		return err.Error()
	}
	for rows.Next() {
		var key, record string
		var in struct {
			Containers []struct {
				RestartCount int32 `json:"restartCount"`
			} `json:"containers"`
		}
		if err := rows.Scan(&key, &record); err != nil || json.Unmarshal([]byte(record), &in) != nil || len(in.Containers) != 1 {
			return fmt.Sprintf("pod record %s unreadable: %v", key, err)
		}
		got[key] = "record " + strconv.Itoa(int(in.Containers[0].RestartCount))
	}
	rows.Close()
	rows, err = db.Query(`SELECT key, payload FROM outbox WHERE kind = 'pod' AND seq IN (SELECT max(seq) FROM outbox WHERE kind = 'pod' GROUP BY key)`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var payload []byte
		var p v1.Pod
		if err := rows.Scan(&key, &payload); err != nil || json.Unmarshal(payload, &p) != nil || len(p.Status.ContainerStatuses) != 1 {
			return fmt.Sprintf("outbox status of %s unreadable: %v", key, err)
		}
		got[key] += ", outbox " + strconv.Itoa(int(p.Status.ContainerStatuses[0].RestartCount))
	}
	var diffs []string
	for key, n := range want {
		if w := fmt.Sprintf("record %d, outbox %d", n, n); got[key] != w {
			diffs = append(diffs, fmt.Sprintf("%s: %q, want %q", key, got[key], w))
		}
	}
	return strings.Join(diffs, "; ")
}

// deletedFiles names the deleted files process pid still has open: a WAL
// a reader deleted under the daemon, which it goes on writing.
func deletedFiles(pid int) string {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	var out []string
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.Contains(l, "state.db") && strings.HasSuffix(l, " (deleted)") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; the daemon writes to deleted files: " + strings.Join(out, ", ")
}

// sqliteOut runs one sqlite3 command and returns its trimmed output.
func sqliteOut(t *testing.T, sqlite3, db, sql string) string {
	t.Helper()
	out, err := exec.Command(sqlite3, db, sql).CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3 %s %q: %v: %s", db, sql, err, out)
	}
	return string(bytes.TrimSpace(out))
}

// holdsWALIndex reports whether process pid holds the shared lock SQLite
// keeps on the "DMS" byte (128) of db-shm while it has the WAL index
// mapped: without it, the next process to open the database takes the
// byte, truncates -shm and rebuilds it under the mapping (SQLite's
// unixLockSharedMemory).
func holdsWALIndex(t *testing.T, pid int, db string) bool {
	t.Helper()
	st, err := os.Stat(db + "-shm")
	must(t, err)
	ino := ":" + strconv.FormatUint(st.Sys().(*syscall.Stat_t).Ino, 10)
	locks, err := os.ReadFile("/proc/locks")
	must(t, err)
	for _, line := range strings.Split(string(locks), "\n") {
		f := strings.Fields(line)
		// 1: POSIX  ADVISORY  READ 22755 08:01:9994996 128 128
		if len(f) < 8 || f[1] != "POSIX" || f[4] != strconv.Itoa(pid) || !strings.HasSuffix(f[5], ino) {
			continue
		}
		start, _ := strconv.Atoi(f[6])
		end, err := strconv.Atoi(f[7])
		if start <= 128 && (f[7] == "EOF" || err == nil && end >= 128) {
			return true
		}
	}
	return false
}
