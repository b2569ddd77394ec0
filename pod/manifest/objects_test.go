package manifest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/objects"
)

const goodConfigMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
data:
  MODE: prod
binaryData:
  blob: AAEC
`

const goodSecret = `apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: default
data:
  password: czNjcmV0
stringData:
  user: admin
`

func TestDecodeContentsObjects(t *testing.T) {
	c, err := DecodeContents([]byte(goodPod + "---\n" + goodConfigMap + "---\n" + goodSecret))
	if err != nil || len(c.Pods) != 1 || len(c.Objects) != 2 || len(c.ObjectErrors) != 0 || !c.ObjectsRead {
		t.Fatalf("%+v, %v", c, err)
	}
	cm, s := c.Objects[0], c.Objects[1]
	if cm.Ref != (objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"}) ||
		string(cm.Data["MODE"]) != "prod" || string(cm.Data["blob"]) != "\x00\x01\x02" {
		t.Fatalf("configmap %+v", cm)
	}
	if s.Kind != objects.Secret || s.Type != "Opaque" || string(s.Data["password"]) != "s3cret" || string(s.Data["user"]) != "admin" {
		t.Fatalf("secret %+v", s)
	}
	if cm.UID == "" || cm.ResourceVersion == "" || cm.UID == s.UID {
		t.Fatalf("identity %q %q / %q", cm.UID, cm.ResourceVersion, s.UID)
	}
	// Only content changes the resourceVersion; the UID stays.
	c2, _ := DecodeContents([]byte(strings.Replace(goodConfigMap, "prod", "dev", 1)))
	if c2.Objects[0].UID != cm.UID || c2.Objects[0].ResourceVersion == cm.ResourceVersion {
		t.Fatal("an edit must keep the UID and change the resourceVersion")
	}
}

// A bad object document is refused alone, with the document, the object
// and the field named; the file's other documents stand.
func TestDecodeContentsBadObject(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad}\ndata: {\"a b\": x}\n", `document 2: configmap "bad": data[a b]: Invalid value: "a b": a valid config key must consist of`},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad}\ndata: {a: x}\nbinaryData: {a: AA==}\n", `data[a]: Invalid value: "a": duplicate of key present in binaryData`},
		{"apiVersion: v1\nkind: Secret\nmetadata: {name: Bad_Name}\n", `document 2: secret "Bad_Name": metadata.name: Invalid value: "Bad_Name"`},
		{"apiVersion: v1\nkind: Secret\nmetadata: {name: bad}\ndata: {k: 3}\n", `document 2: secret "bad": data[k]: Invalid value: expected a base64-encoded string`},
		{"apiVersion: v1\nkind: Secret\nmetadata: {name: bad}\ndata: {k: \"s3cret!\"}\n", `document 2: secret "bad": data[k]: Invalid value: illegal base64 data at input byte 6`},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad}\ndatum: {}\n", `document 2: configmap "bad": unknown field "datum"`},
		{goodConfigMap, `document 2: ConfigMap default/app is already defined in document 1`},
		{"apiVersion: v1\nkind: Secret\nmetadata: {name: tls}\ntype: kubernetes.io/tls\nstringData: {tls.crt: s3cret}\n", `document 2: secret "tls": data[tls.key]: Required value`},
	} {
		c, err := DecodeContents([]byte(goodConfigMap + "---\n" + tc.doc + "---\n" + goodPod))
		if strings.Contains(fmt.Sprint(c.ObjectErrors), "s3cret") {
			t.Errorf("a Secret's value in an error: %v", c.ObjectErrors)
		}
		if err != nil || len(c.Pods) != 1 || len(c.Objects) != 1 || len(c.ObjectErrors) != 1 {
			t.Fatalf("%q: %+v, %v", tc.doc, c, err)
		}
		if got := c.ObjectErrors[0].Err.Error(); !strings.Contains(got, tc.want) {
			t.Errorf("error %q, want %q", got, tc.want)
		}
	}
	// A bad pod refuses the pods, not the objects.
	c, err := DecodeContents([]byte(goodConfigMap + "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {}\n"))
	if err == nil || len(c.Objects) != 1 || !c.ObjectsRead {
		t.Fatalf("%+v, %v", c, err)
	}
	// A document no one can read says nothing of any object.
	c, err = DecodeContents([]byte(goodConfigMap + "---\n: : :\n"))
	if err == nil || c.ObjectsRead {
		t.Fatalf("%+v, %v", c, err)
	}
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDirObjects(t *testing.T) {
	d, clock, _ := testDir(t)
	writeFile(t, d.Path, "a.yaml", goodConfigMap)
	writeFile(t, d.Path, "b.yaml", goodSecret+"---\n"+goodConfigMap)
	st, err := d.Load()
	if err != nil || len(st.Pods) != 1 || len(st.Objects) != 2 || len(st.Invalid) != 1 {
		t.Fatalf("%+v, %v", st, err)
	}
	if inv := st.Invalid[0]; filepath.Base(inv.File) != "b.yaml" || inv.Err.Error() != "ConfigMap default/app is already defined in a.yaml" {
		t.Fatalf("invalid %s: %v", inv.File, inv.Err)
	}
	// A document turned invalid keeps the object's last valid version.
	writeFile(t, d.Path, "a.yaml", strings.Replace(goodConfigMap, "MODE", "MO DE", 1))
	st, _ = d.Load()
	if len(st.Objects) != 2 || string(st.Objects[0].Data["MODE"]) != "prod" || len(st.Invalid) != 2 ||
		!strings.Contains(st.Invalid[0].Err.Error(), `configmap "app": data[MO DE]`) {
		t.Fatalf("%+v %v", st.Objects, st.Invalid)
	}
	// Emptying the file keeps its objects until it is removed; a removal
	// after Confirm takes them away.
	writeFile(t, d.Path, "a.yaml", "")
	os.WriteFile(filepath.Join(d.Path, "b.yaml"), []byte(goodSecret), 0o644)
	d.refresh("b.yaml", clock.now())
	if d.refresh("a.yaml", clock.now()) {
		t.Fatal("an empty read took objects away at once")
	}
	clock.advance(3 * time.Second)
	d.refresh("a.yaml", clock.now())
	d.refresh("b.yaml", clock.now())
	if st := d.state(); len(st.Objects) != 2 || len(st.Invalid) != 1 || st.Invalid[0].Err != errEmpty {
		t.Fatalf("%+v %v", st.Objects, st.Invalid)
	}
	os.Remove(filepath.Join(d.Path, "a.yaml"))
	d.unlinked["a.yaml"] = true
	d.refresh("a.yaml", clock.now())
	if st := d.state(); len(st.Objects) != 1 || st.Objects[0].Name != "db" || len(st.Invalid) != 0 {
		t.Fatalf("%+v %v", st.Objects, st.Invalid)
	}
}

func TestDirObjectBounds(t *testing.T) {
	d, _, _ := testDir(t)
	writeFile(t, d.Path, "a.yaml", goodConfigMap+"---\n"+goodSecret)
	d.MaxObjects = 1
	st, _ := d.Load()
	if len(st.Objects) != 1 || len(st.Invalid) != 1 ||
		st.Invalid[0].Err.Error() != "Secret default/db refused: the manifest directory's objects would be more than objects.maxObjects (1)" {
		t.Fatalf("%+v %v", st.Objects, st.Invalid)
	}
	d.MaxObjects, d.MaxObjectBytes = 0, 16
	st = d.state()
	if len(st.Objects) != 1 || len(st.Invalid) != 1 || st.Invalid[0].Err.Error() != "Secret default/db refused: the manifest directory's objects would hold more than objects.maxBytes (16 bytes)" {
		t.Fatalf("%+v %v", st.Objects, st.Invalid)
	}
}

// Whatever a file holds, decoding its objects never panics, and no error
// carries a Secret's data.
func FuzzDecodeContentsObjects(f *testing.F) {
	f.Add([]byte(goodConfigMap + "---\n" + goodSecret))
	f.Add([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: czNjcmV0}\ntype: kubernetes.io/dockerconfigjson\n"))
	f.Add([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {\"a b\": s3cret}\n"))
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: s3cret}\nbinaryData: {a: czNjcmV0}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeContents(data)
		if err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
		for _, o := range c.Objects {
			if o.UID == "" || o.ResourceVersion == "" || o.Namespace == "" {
				t.Fatalf("object without identity: %+v", o.Ref)
			}
		}
		for _, e := range c.ObjectErrors {
			if e.Ref.Kind == objects.Secret && strings.Contains(e.Err.Error(), "s3cret") {
				t.Fatalf("a Secret's value in an error: %v", e.Err)
			}
		}
	})
}

// A change to an object alone is a new state for the daemon.
func TestDirWatchSeesObjectChange(t *testing.T) {
	dir := t.TempDir()
	d := &Dir{Path: dir, Resync: time.Hour, Settle: 5 * time.Millisecond}
	if err := d.Watch(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "objects.yaml", goodConfigMap)
	st, err := d.Load()
	if err != nil || len(st.Objects) != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan State, 4)
	go d.Run(ctx, out)
	writeFile(t, dir, "objects.yaml", strings.Replace(goodConfigMap, "prod", "dev", 1))
	if st := receive(t, out); len(st.Objects) != 1 || string(st.Objects[0].Data["MODE"]) != "dev" {
		t.Fatalf("after the edit: %+v", st.Objects)
	}
}

// A file holding Secrets that others may read is read, with a warning,
// once while it lasts.
func TestDirWarnsOfReadableSecrets(t *testing.T) {
	d, _, log := testDir(t)
	writeFile(t, d.Path, "db.yaml", goodSecret)
	os.Chmod(filepath.Join(d.Path, "db.yaml"), 0o644)
	d.Load()
	d.Load()
	if st := d.state(); len(st.Objects) != 1 {
		t.Fatalf("objects %v", st.Objects)
	}
	const warning = "manifest file holds Secrets that others may read (mode 0644); make it 0600"
	if n := strings.Count(log.String(), warning); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, log)
	}
	os.Chmod(filepath.Join(d.Path, "db.yaml"), 0o600)
	writeFile(t, d.Path, "db.yaml", goodSecret+"\n")
	d.Load()
	writeFile(t, d.Path, "cm.yaml", goodConfigMap) // 0644, no Secret: no warning
	d.Load()
	if n := strings.Count(log.String(), "others may read"); n != 1 {
		t.Fatalf("%d warnings, want still 1:\n%s", n, log)
	}
}

func TestDirImmutableObjectKeepsItsData(t *testing.T) {
	d, _, _ := testDir(t)
	immutable := goodConfigMap + "immutable: true\n"
	writeFile(t, d.Path, "a.yaml", immutable)
	if st, err := d.Load(); err != nil || len(st.Objects) != 1 || !st.Objects[0].Immutable {
		t.Fatalf("%+v, %v", st, err)
	}
	// A change of data, or making it mutable, is refused as the API server
	// refuses it; the object keeps what it had.
	for _, edit := range []string{strings.Replace(immutable, "prod", "test", 1), goodConfigMap} {
		writeFile(t, d.Path, "a.yaml", edit)
		st, _ := d.Load()
		if len(st.Objects) != 1 || string(st.Objects[0].Data["MODE"]) != "prod" || !st.Objects[0].Immutable {
			t.Fatalf("after an edit: %+v", st.Objects)
		}
		if len(st.Invalid) != 1 || !strings.Contains(st.Invalid[0].Err.Error(), "ConfigMap default/app in ") ||
			!strings.Contains(st.Invalid[0].Err.Error(), "field is immutable when `immutable` is set") {
			t.Fatalf("invalid: %+v", st.Invalid)
		}
	}
	// The same content again is no change.
	writeFile(t, d.Path, "a.yaml", immutable)
	if st, _ := d.Load(); len(st.Invalid) != 0 || len(st.Objects) != 1 {
		t.Fatalf("%+v %+v", st.Objects, st.Invalid)
	}
}
