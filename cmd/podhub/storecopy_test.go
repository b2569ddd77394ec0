package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
)

// A fleet made through the CLI (devices enrolled and labelled, a
// DaemonSet, a ConfigMap and a Secret applied, a device's statuses with
// events) is the same on PostgreSQL after podhub store copy: every
// table row by row, and what the CLI shows through a replica's data
// directory (the keys copied, fleet.db left behind). A second copy into
// the now non-empty store is refused and changes nothing.
func TestStoreCopy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hub")
	cliOK(t, dir, "init")
	for _, id := range []string{"gw-1", "gw-2"} {
		cliOK(t, dir, "device", "add", id, "--out", filepath.Join(t.TempDir(), id))
	}
	lite, err := fleetdb.Open(filepath.Join(dir, "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	stopLite := serveFleetAPI(t, dir, lite)
	cliOK(t, dir, "label", "device", "gw-1", "site=plant-2")
	manifest := filepath.Join(t.TempDir(), "fleet.yaml")
	os.WriteFile(manifest, []byte(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: registry.example/agent:1}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app}
data: {mode: fast}
---
apiVersion: v1
kind: Secret
metadata: {name: db}
stringData: {password: s3cret}
`), 0o600)
	cliOK(t, dir, "apply", "-f", manifest)
	// An hour ago: the device is NotReady in every read, however long
	// the test takes.
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"},
		Spec:   v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning}}
	if _, _, _, err := lite.ApplyStatus(&protocol.StatusBatch{Device: "gw-1", Epoch: "e1", Items: []protocol.StatusItem{
		{Seq: 1, Key: "default/app", Pod: pod},
		{Seq: 2, Key: "default/app", Event: &protocol.Event{Time: at, Type: "Normal", Reason: "Started", Message: "Started container app"}},
	}}, at); err != nil {
		t.Fatal(err)
	}
	reads := [][]string{
		{"get", "devices", "-o", "json"},
		{"get", "pods", "-A", "-o", "json"},
		{"get", "daemonsets", "-o", "json"},
		{"get", "configmaps", "-A", "-o", "json"},
		{"get", "secrets", "-A", "-o", "json"},
	}
	want := map[string]string{}
	for _, r := range reads {
		want[strings.Join(r, " ")] = cliOK(t, dir, r...)
	}
	wantRows := dumpTables(t, lite)
	stopLite()

	url := pgtest.URL(t)
	out := cliOK(t, dir, "store", "copy", "--to", url)
	for _, s := range []string{"TABLE", "devices ", "events ", "config_objects ", "hub.key", "pki/", "secrets.key", "releases/", "podhub.yaml", "--replica-id"} {
		if !strings.Contains(out, s) {
			t.Errorf("store copy's output lacks %q:\n%s", s, out)
		}
	}
	if pw := pgtestPassword(t, url); strings.Contains(out, pw) {
		t.Errorf("store copy printed the password:\n%s", out)
	}

	pg, err := fleetdb.OpenStore(url)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	gotRows := dumpTables(t, pg)
	if len(wantRows["devices"]) != 2 || len(wantRows["config_objects"]) != 2 || len(wantRows["events"]) != 1 {
		t.Errorf("the SQLite fleet before the copy: devices %q, objects %q, events %q", wantRows["devices"], wantRows["config_objects"], wantRows["events"])
	}
	for table, rows := range wantRows {
		if strings.Join(gotRows[table], "\n") != strings.Join(rows, "\n") {
			t.Errorf("table %s on PostgreSQL:\n%s\nwant:\n%s", table, strings.Join(gotRows[table], "\n"), strings.Join(rows, "\n"))
		}
	}

	// A replica's data directory: the data directory without fleet.db,
	// its store the copy.
	replicaDir := filepath.Join(t.TempDir(), "replica")
	if b, err := exec.Command("cp", "-a", dir, replicaDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, b)
	}
	for _, f := range []string{"fleet.db", "fleet.db-wal", "fleet.db-shm", "podhub.sock"} {
		os.Remove(filepath.Join(replicaDir, f))
	}
	serveFleetAPI(t, replicaDir, pg)
	for _, r := range reads {
		if got := cliOK(t, replicaDir, r...); got != want[strings.Join(r, " ")] {
			t.Errorf("%s on PostgreSQL:\n%s\nwant (SQLite):\n%s", strings.Join(r, " "), got, want[strings.Join(r, " ")])
		}
	}
	if !strings.Contains(want["get pods -A -o json"], `"app"`) || !strings.Contains(want["get devices -o json"], "plant-2") {
		t.Errorf("the fleet read before the copy lacks its mirror pod or label:\n%s\n%s", want["get pods -A -o json"], want["get devices -o json"])
	}

	// Again into the now non-empty store: refused, nothing changed.
	_, errOut, code := runCLI(t, "--data-dir", dir, "store", "copy", "--to", url)
	if code != 1 || !strings.Contains(errOut, "holds") || !strings.Contains(errOut, "never merges two fleets") || strings.Contains(errOut, pgtestPassword(t, url)) {
		t.Errorf("a second copy: exit %d, stderr %q", code, errOut)
	}
	if again := dumpTables(t, pg); strings.Join(again["devices"], "\n") != strings.Join(gotRows["devices"], "\n") || len(again["events"]) != len(gotRows["events"]) {
		t.Error("the refused copy changed the store")
	}
}

// While a podhub serve holds the SQLite store's lock, store copy is
// refused naming its pid, before it touches the target.
func TestStoreCopyRefusedWhileServeRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hub")
	cliOK(t, dir, "init")
	cliOK(t, dir, "device", "add", "gw-1", "--out", filepath.Join(t.TempDir(), "gw-1"))
	held, err := os.OpenFile(filepath.Join(dir, "fleet.db.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	held.WriteString("4242\n")
	url := pgtest.URL(t)
	_, errOut, code := runCLI(t, "--data-dir", dir, "store", "copy", "--to", url)
	if code != 1 || !strings.Contains(errOut, "pid 4242") || !strings.Contains(errOut, "stop it before the copy") {
		t.Fatalf("store copy beside a serve: exit %d, stderr %q", code, errOut)
	}
	db, err := postgres.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("the target after a refused copy: %d tables (%v), want untouched", tables, err)
	}
}

// --to is required and must be PostgreSQL's; a store podhub cannot
// reach fails naming it without its password.
func TestStoreCopyUsage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hub")
	cliOK(t, dir, "init")
	cliOK(t, dir, "device", "add", "gw-1", "--out", filepath.Join(t.TempDir(), "gw-1"))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"store"}, "usage: podhub store copy"},
		{[]string{"store", "move"}, `store "move": want copy`},
		{[]string{"store", "copy"}, "--to postgres://… is required"},
		{[]string{"store", "copy", "--to", "/srv/fleet.db"}, "not a PostgreSQL URL"},
		{[]string{"store", "copy", "--to", "postgres://h/db", "extra"}, `unexpected argument "extra"`},
		{[]string{"store", "copy", "--to", "postgres://podhub:Sup3rSecretPw@127.0.0.1:1/fleet?connect_timeout=2"}, "postgres://podhub:xxxxx@127.0.0.1:1/fleet"},
		{[]string{"store", "copy", "--to", "postgresql://podhub@127.0.0.1:1/fleet?password=Sup3rSecretPw&connect_timeout=2"}, "password=xxxxx"},
	} {
		out, errOut, code := runCLI(t, append([]string{"--data-dir", dir}, c.args...)...)
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "Sup3rSecretPw") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q, want %q", c.args, code, out, errOut, c.want)
		}
	}
	// No fleet.db: nothing to copy (and none made).
	empty := filepath.Join(t.TempDir(), "empty")
	cliOK(t, empty, "init")
	if _, errOut, code := runCLI(t, "--data-dir", empty, "store", "copy", "--to", "postgres://h/db"); code != 1 || !strings.Contains(errOut, "fleet.db") {
		t.Errorf("without fleet.db: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(empty, "fleet.db")); err == nil {
		t.Error("store copy made a fleet.db")
	}
}

// serveFleetAPI serves the hub's API on fleet at the socket in dir, with
// dir's secrets key; the returned function stops it (and runs at the
// test's end).
func serveFleetAPI(t *testing.T, dir string, fleet *fleetdb.Fleet) (stop func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := hub.New(hub.Config{}, fleet, log)
	c := &cli{dataDir: dir, out: io.Discard, errOut: io.Discard}
	if err := c.loadSecretsKey(config{}, h.Objects(), log); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "podhub.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h.API(time.Minute).Handler()}
	go srv.Serve(l)
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			srv.Close()
			fleet.Close()
		}
	}
	t.Cleanup(stop)
	return stop
}

// dumpTables is every table the copy carries, row by row
// (fleetdb.TableRows), with the columns of the PostgreSQL schema.
func dumpTables(t *testing.T, f *fleetdb.Fleet) map[string][]string {
	t.Helper()
	ctx := context.Background()
	scratch, err := fleetdb.OpenStore(pgtest.URL(t)) // the schema's columns, rowid included
	if err != nil {
		t.Fatal(err)
	}
	defer scratch.Close()
	out := map[string][]string{}
	rows, err := scratch.SQL().Query(`SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, column_name`)
	if err != nil {
		t.Fatal(err)
	}
	cols := map[string][]string{}
	for rows.Next() {
		var table, col string
		if err := rows.Scan(&table, &col); err != nil {
			t.Fatal(err)
		}
		if _, skipped := fleetdb.CopySkipped[table]; !skipped {
			cols[table] = append(cols[table], col)
		}
	}
	rows.Close()
	for table, c := range cols {
		if out[table], err = fleetdb.TableRows(ctx, f.SQL(), table, c); err != nil {
			t.Fatalf("table %s: %v", table, err)
		}
	}
	return out
}

// pgtestPassword is the password in a URL of pgtest's.
func pgtestPassword(t *testing.T, store string) string {
	t.Helper()
	u, err := neturl.Parse(store)
	if err != nil {
		t.Fatal(err)
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" {
		t.Fatalf("pgtest's URL %s has no password", postgres.Mask(store))
	}
	return pw
}
