package objectdb_test

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
	"github.com/podvisor/podvisor/sync/hub/kinds"

	"github.com/podvisor/podvisor/test/pgtest"
)

type rig struct {
	t       *testing.T
	dir     string
	url     string // the fleet store: fleet.db in dir, or a PostgreSQL database
	fleet   *fleetdb.Fleet
	store   *objectdb.Store
	key     *objectdb.Key
	now     time.Time
	changes [][]objects.Ref
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), now: time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)}
	var err error
	if r.key, err = objectdb.CreateKeyFile(filepath.Join(r.dir, "secrets.key")); err != nil {
		t.Fatal(err)
	}
	r.url = filepath.Join(r.dir, "fleet.db")
	if u := pgtest.Store(t); strings.Contains(u, "://") {
		r.url = u
	}
	r.open()
	return r
}

// open opens the fleet database with the rig's key.
func (r *rig) open() {
	r.t.Helper()
	f, err := fleetdb.OpenStore(r.url)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { f.Close() })
	r.fleet, r.store = f, objectdb.New(f.SQL())
	r.store.SetKeys(objectdb.NewKeyring(r.key))
	r.store.OnChange(func(refs []objects.Ref) { r.changes = append(r.changes, refs) })
}

func (r *rig) apply(file string) error {
	r.t.Helper()
	objs, err := kinds.Decode("objs.yaml", []byte(file))
	if err != nil {
		r.t.Fatal(err)
	}
	return r.store.Apply(objs, r.now, nil)
}

func (r *rig) mustApply(file string) {
	r.t.Helper()
	if err := r.apply(file); err != nil {
		r.t.Fatal(err)
	}
}

func randomMarker(t *testing.T) string {
	b := make([]byte, 12)
	rand.Read(b)
	return "MARKER" + hex.EncodeToString(b)
}

func secretFile(name, value, extra string) string {
	return "apiVersion: v1\nkind: Secret\nmetadata: {name: " + name + ", annotations: {note: \"" + value + "\"}}\n" + extra +
		"stringData: {password: \"" + value + "\"}\n"
}

const cmFile = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: shop}\ndata: {app.conf: \"x=1\"}\nbinaryData: {logo: AAEC}\n"

// Objects get the server's metadata; applied again unchanged they keep
// their resourceVersion; changed, the next one; watchers hear only what
// changed.
func TestApplyGivesServerMetadataAndVersions(t *testing.T) {
	pgtest.EachStore(t, testApplyGivesServerMetadataAndVersions)
}

func testApplyGivesServerMetadataAndVersions(t *testing.T) {
	r := newRig(t)
	r.mustApply(cmFile + "---\n" + secretFile("db", "pw1", ""))
	es, err := r.store.Entries(objects.ConfigMap, "")
	if err != nil || len(es) != 1 {
		t.Fatalf("entries %+v, %v", es, err)
	}
	e := es[0]
	if e.UID == "" || e.ResourceVersion != "1" || e.Keys != 2 || !e.Created.Equal(r.now) || e.Namespace != "shop" {
		t.Errorf("configmap entry %+v", e)
	}
	cm, err := r.store.Get(objects.Ref{Kind: objects.ConfigMap, Namespace: "shop", Name: "app"})
	if err != nil || string(cm.Data["app.conf"]) != "x=1" || string(cm.Data["logo"]) != "\x00\x01\x02" || cm.UID != e.UID || cm.ResourceVersion != "1" {
		t.Fatalf("configmap %+v, %v", cm, err)
	}
	sec, err := r.store.Get(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"})
	if err != nil || string(sec.Data["password"]) != "pw1" || sec.Type != v1.SecretTypeOpaque || sec.ResourceVersion != "2" {
		t.Fatalf("secret %+v, %v", sec, err)
	}
	if len(r.changes) != 1 || len(r.changes[0]) != 2 {
		t.Errorf("changes %v", r.changes)
	}

	r.now = r.now.Add(time.Hour)
	r.mustApply(cmFile + "---\n" + secretFile("db", "pw1", ""))
	if len(r.changes) != 1 {
		t.Errorf("an unchanged apply told of changes: %v", r.changes)
	}
	r.mustApply(secretFile("db", "pw2", ""))
	sec2, _ := r.store.Get(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"})
	if sec2.UID != sec.UID || sec2.ResourceVersion != "3" || string(sec2.Data["password"]) != "pw2" {
		t.Errorf("updated secret %+v", sec2)
	}
	full, _ := r.store.Secret("default", "db")
	if !full.CreationTimestamp.Time.Equal(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)) {
		t.Errorf("creationTimestamp moved: %v", full.CreationTimestamp)
	}
	if len(r.changes) != 2 || r.changes[1][0] != (objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"}) {
		t.Errorf("changes %v", r.changes)
	}
	list, err := r.store.List(objects.Secret, "default")
	if err != nil || len(list) != 1 || list[0].Name != "db" {
		t.Errorf("list %+v %v", list, err)
	}
	if l, _ := r.store.List(objects.ConfigMap, "default"); len(l) != 0 {
		t.Errorf("configmaps of default: %+v", l)
	}

	// Deleted: gone, watchers told; a pod that uses it sees NotFound.
	if err := r.store.Delete(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"}); err != nil {
		t.Fatal(err)
	}
	_, err = r.store.Get(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"})
	if !errors.Is(err, objects.ErrNotFound) || err.Error() != `secret "db" not found` {
		t.Errorf("deleted: %v", err)
	}
	if err := r.store.Delete(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"}); !errors.Is(err, objects.ErrNotFound) {
		t.Errorf("deleted twice: %v", err)
	}
	if len(r.changes) != 3 {
		t.Errorf("changes %v", r.changes)
	}
	// Made again, it is a new object: a new uid, a later version.
	r.mustApply(secretFile("db", "pw3", ""))
	sec3, _ := r.store.Get(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"})
	if sec3.UID == sec.UID || sec3.ResourceVersion != "4" {
		t.Errorf("made again: %+v", sec3)
	}
}

// The update rules of immutable objects hold, naming the file's
// document; nothing of a refused apply is kept.
func TestApplyRefusesChangesToImmutableObjects(t *testing.T) {
	pgtest.EachStore(t, testApplyRefusesChangesToImmutableObjects)
}

func testApplyRefusesChangesToImmutableObjects(t *testing.T) {
	r := newRig(t)
	r.mustApply(secretFile("db", "pw1", "immutable: true\n") + "---\n" + strings.Replace(cmFile, "\ndata:", "\nimmutable: true\ndata:", 1))
	for _, c := range []struct{ name, file, want string }{
		{"secret data", secretFile("db", "pw2", "immutable: true\n"),
			"objs.yaml: document 1: Secret default/db: data: Forbidden: field is immutable when `immutable` is set"},
		{"secret mutable again", secretFile("db", "pw1", ""),
			"objs.yaml: document 1: Secret default/db: immutable: Forbidden: field is immutable when `immutable` is set"},
		{"secret type", secretFile("db", "pw1", "immutable: true\ntype: example.com/x\n"),
			`objs.yaml: document 1: Secret default/db: type: Invalid value: "example.com/x": field is immutable`},
	} {
		err := r.apply(c.file)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: got %v\nwant %s", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("%s: the error shows a value: %v", c.name, err)
		}
	}
	err := r.apply(strings.Replace(strings.Replace(cmFile, "x=1", "x=2", 1), "\ndata:", "\nimmutable: true\ndata:", 1) + "---\n" + secretFile("other", "x", ""))
	if err == nil || !strings.Contains(err.Error(), "objs.yaml: document 1: ConfigMap shop/app: data: Forbidden") {
		t.Errorf("configmap data: %v", err)
	}
	if _, err := r.store.Get(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "other"}); !errors.Is(err, objects.ErrNotFound) {
		t.Errorf("a refused apply kept an object: %v", err)
	}
	// Labels may still change.
	r.mustApply(strings.Replace(secretFile("db", "pw1", "immutable: true\n"), "metadata: {", "metadata: {labels: {a: b}, ", 1))
}

// fleet.db and its WAL never hold a Secret's data in clear, nor its
// base64, nor its annotations (a last-applied annotation may repeat it).
func TestSecretsAreSealedAtRest(t *testing.T) {
	r := newRig(t)
	marker := randomMarker(t)
	r.mustApply(secretFile("db", marker, ""))
	r.mustApply(secretFile("db", marker+"2", "")) // and an update
	grep := func(when string) {
		for _, name := range []string{"fleet.db", "fleet.db-wal"} {
			b, err := os.ReadFile(filepath.Join(r.dir, name))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, needle := range []string{marker, base64.StdEncoding.EncodeToString([]byte(marker)),
				base64.StdEncoding.EncodeToString([]byte(marker + "2"))} {
				if bytes.Contains(b, []byte(needle)) {
					t.Errorf("%s: %s holds %q in clear", when, name, needle)
				}
			}
		}
	}
	grep("open")
	r.fleet.Close() // checkpoints the WAL into fleet.db
	grep("closed")
	// ConfigMaps are kept in clear: the grep finds what is there.
	r.open()
	r.mustApply(strings.Replace(cmFile, "x=1", marker, 1))
	r.fleet.Close()
	if b, _ := os.ReadFile(filepath.Join(r.dir, "fleet.db")); !bytes.Contains(b, []byte(marker)) {
		t.Error("the grep finds no ConfigMap value either: it proves nothing")
	}
}

// Another key opens nothing and says why; the Secrets stay deletable.
func TestWrongKeyIsAClearError(t *testing.T) { pgtest.EachStore(t, testWrongKeyIsAClearError) }

func testWrongKeyIsAClearError(t *testing.T) {
	r := newRig(t)
	r.mustApply(secretFile("db", "pw", ""))
	other, err := objectdb.CreateKeyFile(filepath.Join(r.dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	r.store.SetKeys(objectdb.NewKeyring(other))
	_, err = r.store.Get(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"})
	want := "Secret default/db: sealed under secrets key " + r.key.ID + ", but the key file " + other.File + " holds key " + other.ID +
		": is it the key file this hub's Secrets were stored with?"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	if n, id, err := r.store.Unreadable(); n != 1 || id != r.key.ID || err != nil {
		t.Errorf("Unreadable: %d %q %v", n, id, err)
	}
	if err := r.apply(secretFile("db", "pw2", "")); err == nil || !strings.Contains(err.Error(), "sealed under secrets key") {
		t.Errorf("an update over an unreadable Secret: %v", err)
	}
	// The old key among the older ones opens it again.
	r.store.SetKeys(objectdb.NewKeyring(other, r.key))
	if _, err := r.store.Get(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"}); err != nil {
		t.Errorf("with the old key in the ring: %v", err)
	}
	r.store.SetKeys(objectdb.NewKeyring(other))
	if err := r.store.Delete(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"}); err != nil {
		t.Errorf("delete without the key: %v", err)
	}
	// No key at all: a Secret is not stored.
	r.store.SetKeys(nil)
	if err := r.apply(secretFile("db", "pw", "")); !errors.Is(err, objectdb.ErrNoKey) {
		t.Errorf("no key: %v", err)
	}
}

// A sealed row copied over another Secret's does not open: the sealing
// binds namespace, name and uid.
func TestSealedRowIsBoundToItsSecret(t *testing.T) {
	pgtest.EachStore(t, testSealedRowIsBoundToItsSecret)
}

func testSealedRowIsBoundToItsSecret(t *testing.T) {
	r := newRig(t)
	r.mustApply(secretFile("a", "pw-a", "") + "---\n" + secretFile("b", "pw-b", ""))
	db := r.fleet.SQL()
	var blob []byte
	if err := db.QueryRow(`SELECT object FROM config_objects WHERE name = 'a'`).Scan(&blob); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE config_objects SET object = ? WHERE name = 'b'`, blob); err != nil {
		t.Fatal(err)
	}
	_, err := r.store.Get(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "b"})
	if err == nil || !strings.Contains(err.Error(), "Secret default/b: cannot be opened with secrets key") {
		t.Errorf("swapped row: %v", err)
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets.key")
	k, err := objectdb.CreateKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 || fi.Size() != objectdb.KeySize || len(k.ID) != 16 {
		t.Errorf("key file mode %v size %d id %q", fi.Mode(), fi.Size(), k.ID)
	}
	if _, err := objectdb.CreateKeyFile(path); err == nil {
		t.Error("an existing key file was replaced")
	}
	again, err := objectdb.ReadKeyFile(path)
	if err != nil || again.ID != k.ID {
		t.Errorf("read back: %v %v", again, err)
	}
	os.Chmod(path, 0o644)
	if _, err := objectdb.ReadKeyFile(path); err == nil || !strings.Contains(err.Error(), "lets other users read it; chmod 600") {
		t.Errorf("0644: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("abc"), 0o600)
	if _, err := objectdb.ReadKeyFile(short); err == nil || !strings.Contains(err.Error(), "3 bytes, want 32") {
		t.Errorf("short: %v", err)
	}
	if _, err := objectdb.ReadKeyFile(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// An apply is one transaction with the rest of its file: a refused
// object undoes what alongside wrote, and a failing alongside stores no
// object.
func TestApplyIsAllOrNothingWithAlongside(t *testing.T) {
	pgtest.EachStore(t, testApplyIsAllOrNothingWithAlongside)
}

func testApplyIsAllOrNothingWithAlongside(t *testing.T) {
	r := newRig(t)
	db := r.fleet.SQL()
	if _, err := db.Exec(`CREATE TABLE other_part (x TEXT)`); err != nil {
		t.Fatal(err)
	}
	r.mustApply(secretFile("db", "pw1", "immutable: true\n"))
	objs, err := kinds.Decode("f.yaml", []byte(cmFile+"---\n"+secretFile("db", "pw2", "immutable: true\n")))
	if err != nil {
		t.Fatal(err)
	}
	err = r.store.Apply(objs, r.now, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO other_part VALUES ('workload')`)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "f.yaml: document 2: Secret default/db: data: Forbidden") {
		t.Fatalf("got %v", err)
	}
	var n int
	db.QueryRow(`SELECT COUNT(*) FROM other_part`).Scan(&n)
	if n != 0 {
		t.Error("alongside's write was kept by a refused apply")
	}
	if _, err := r.store.Get(objects.Ref{Kind: objects.ConfigMap, Namespace: "shop", Name: "app"}); !errors.Is(err, objects.ErrNotFound) {
		t.Errorf("a refused apply kept its ConfigMap: %v", err)
	}
	objs, _ = kinds.Decode("f.yaml", []byte(cmFile))
	if err := r.store.Apply(objs, r.now, func(*sql.Tx) error { return errors.New("workloads refused") }); err == nil {
		t.Fatal("alongside's error was lost")
	}
	if _, err := r.store.Get(objects.Ref{Kind: objects.ConfigMap, Namespace: "shop", Name: "app"}); !errors.Is(err, objects.ErrNotFound) {
		t.Errorf("a ConfigMap was stored though alongside failed: %v", err)
	}
	if len(r.changes) != 1 {
		t.Errorf("refused applies told of changes: %v", r.changes)
	}
}
