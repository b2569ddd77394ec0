package e2e

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	_ "modernc.org/sqlite" // to rewrite the daemon's records
)

// A crash-looping pod keeps restarting after the wall clock steps back a
// year while the daemon is down. The step is simulated without touching
// the host clock: every time the daemon stored (its records, and what the
// shims wrote in the instance directories) is moved a year ahead, which is
// what the daemon sees after such a step.
func TestCrashLoopSurvivesAClockStepBackAYear(t *testing.T) {
	d := newDaemon(t)
	d.withConfig("backoff: {initial: 2s, max: 2s}\n")
	d.start()
	starts := filepath.Join(d.dir, "starts")
	d.write("crashloop.yaml", processPod("crashloop", "Always", 2, "echo start >> "+starts+"; exit 1"))
	d.waitPod("crashloop", 20*time.Second, func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount >= 2 && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
	})
	waitRecords(t, filepath.Join(d.data, "state.db"), `"notBefore"`) // the backoff is stored
	d.stop(syscall.SIGKILL)

	const year = 365 * 24 * time.Hour
	shiftDatabase(t, filepath.Join(d.data, "state.db"), year)
	files, _ := filepath.Glob(filepath.Join(d.data, "containers", "*", "*.json"))
	for _, f := range files {
		shiftFile(t, f, year)
	}
	before := len(readLines(starts))
	d.start()
	// Backoff is 2s: two more starts take about 4s. Waiting a year is
	// what the stored "next restart" would have made of it.
	waitForLong(t, 20*time.Second, "two more starts after the step", func() bool { return len(readLines(starts)) >= before+2 })
	p := d.waitPod("crashloop", time.Second, func(*v1.Pod) bool { return true })
	if st := p.Status.StartTime; st == nil || st.After(time.Now().Add(time.Second)) {
		t.Fatalf("startTime %v is in the future: ages would be negative", st)
	}
}

// shiftDatabase moves every time in the daemon's pod records by d.
func shiftDatabase(t *testing.T, path string, d time.Duration) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	must(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	rows, err := db.Query(`SELECT uid, record FROM pods`)
	must(t, err)
	records := map[string][]byte{}
	for rows.Next() {
		var uid string
		var record []byte
		must(t, rows.Scan(&uid, &record))
		records[uid] = shiftJSON(t, record, d)
	}
	must(t, rows.Err())
	rows.Close()
	if len(records) == 0 {
		t.Fatal("no pod records to shift")
	}
	for uid, record := range records {
		_, err := db.Exec(`UPDATE pods SET record = ? WHERE uid = ?`, string(record), uid)
		must(t, err)
	}
	_, err = db.Exec(`UPDATE container_instances SET started_at = started_at + ?, finished_at = finished_at + ?`,
		d.Milliseconds(), d.Milliseconds())
	must(t, err)
}

func shiftFile(t *testing.T, path string, d time.Duration) {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	must(t, os.WriteFile(path, shiftJSON(t, data, d), 0o600))
}

// shiftJSON moves every RFC 3339 time in a JSON document by d.
func shiftJSON(t *testing.T, data []byte, d time.Duration) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	must(t, dec.Decode(&v))
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		case string:
			if at, err := time.Parse(time.RFC3339Nano, x); err == nil && at.Year() > 2000 {
				return at.Add(d).Format(time.RFC3339Nano)
			}
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	must(t, err)
	return out
}
