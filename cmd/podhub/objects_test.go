package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
)

// serveAPI serves the hub's API on the socket in dir, in-process, with
// the secrets key serve would load; it stops with the test.
func serveAPI(t *testing.T, dir string) *hub.Hub {
	t.Helper()
	fleet, err := fleetdb.Open(filepath.Join(dir, "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(hub.Config{}, fleet, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := &cli{dataDir: dir, out: io.Discard, errOut: io.Discard}
	if err := c.loadSecretsKey(config{}, h.Objects(), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "podhub.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h.API(time.Minute).Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close(); fleet.Close() })
	return h
}

func cliOK(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, errOut, code := runCLI(t, append([]string{"--data-dir", dir}, args...)...)
	if code != 0 {
		t.Fatalf("%q: code %d, stderr %q", args, code, errOut)
	}
	return out
}

// apply, get, describe and delete of ConfigMaps and Secrets print what
// kubectl prints, and never a Secret's value.
func TestConfigMapsAndSecretsThroughTheCLI(t *testing.T) {
	dir := t.TempDir()
	serveAPI(t, dir)
	b := make([]byte, 8)
	rand.Read(b)
	marker := "MARKER" + hex.EncodeToString(b)
	file := filepath.Join(dir, "objs.yaml")
	os.WriteFile(file, []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: app, labels: {tier: web, app: shop}}
data:
  app.conf: |
    x=1
  mode: fast
binaryData: {logo: AAEC}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: other, namespace: lab}
---
apiVersion: v1
kind: Secret
metadata:
  name: db
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"stringData":{"password":"`+marker+`"}}'
    note: kept
stringData: {password: "`+marker+`", user: admin}
---
apiVersion: v1
kind: Secret
metadata: {name: tls}
type: kubernetes.io/tls
data: {tls.crt: `+base64.StdEncoding.EncodeToString([]byte(marker))+`, tls.key: ""}
`), 0o600)
	if out := cliOK(t, dir, "apply", "-f", file); out != file+": 2 configmap(s), 2 secret(s) applied\n" {
		t.Errorf("apply: %q", out)
	}
	lines := func(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }
	cols := func(line string) string { return strings.Join(strings.Fields(line), " ") }

	out := cliOK(t, dir, "get", "configmaps")
	if l := lines(out); len(l) != 2 || cols(l[0]) != "NAME DATA AGE" || !strings.HasPrefix(cols(l[1]), "app 3 ") {
		t.Errorf("get configmaps:\n%s", out)
	}
	out = cliOK(t, dir, "get", "cm", "-A")
	if l := lines(out); len(l) != 3 || cols(l[0]) != "NAMESPACE NAME DATA AGE" || !strings.HasPrefix(cols(l[1]), "default app 3 ") ||
		!strings.HasPrefix(cols(l[2]), "lab other 0 ") {
		t.Errorf("get cm -A:\n%s", out)
	}
	out = cliOK(t, dir, "get", "configmap", "other", "-n", "lab")
	if l := lines(out); len(l) != 2 || !strings.HasPrefix(cols(l[1]), "other 0 ") {
		t.Errorf("get configmap other -n lab:\n%s", out)
	}
	out = cliOK(t, dir, "get", "secrets")
	if l := lines(out); len(l) != 3 || cols(l[0]) != "NAME TYPE DATA AGE" || !strings.HasPrefix(cols(l[1]), "db Opaque 2 ") ||
		!strings.HasPrefix(cols(l[2]), "tls kubernetes.io/tls 2 ") {
		t.Errorf("get secrets:\n%s", out)
	}

	out = cliOK(t, dir, "describe", "configmap", "app")
	want := `Name:         app
Namespace:    default
Labels:       app=shop
              tier=web
Annotations:  <none>

Data
====
app.conf:
----
x=1


mode:
----
fast


BinaryData
====
logo: 3 bytes

Events:  <none>
`
	if out != want {
		t.Errorf("describe configmap:\n%s\nwant:\n%s", out, want)
	}
	out = cliOK(t, dir, "describe", "secret", "db")
	want = `Name:         db
Namespace:    default
Labels:       <none>
Annotations:  note: kept

Type:  Opaque

Data
====
password:  22 bytes
user:      5 bytes
`
	if out != want {
		t.Errorf("describe secret:\n%s\nwant:\n%s", out, want)
	}

	// No output shows a Secret's value: not in clear, not in base64.
	for _, args := range [][]string{
		{"get", "secrets", "-o", "json"}, {"get", "secrets", "-o", "yaml"}, {"get", "secret", "db", "-o", "yaml"},
		{"get", "secret", "tls", "-o", "json"}, {"get", "secrets", "-A", "-o", "json"}, {"describe", "secret", "tls"},
	} {
		out := cliOK(t, dir, args...)
		for _, needle := range []string{marker, base64.StdEncoding.EncodeToString([]byte(marker)), "last-applied"} {
			if strings.Contains(out, needle) {
				t.Errorf("%q shows %q:\n%s", args, needle, out)
			}
		}
		if !strings.Contains(out, `"db"`) && !strings.Contains(out, "name: db") && !strings.Contains(out, "tls") {
			t.Errorf("%q: the secret is not there:\n%s", args, out)
		}
		if args[len(args)-1] == "yaml" && !strings.HasPrefix(out, secretsOmitted) {
			t.Errorf("%q does not say its data is omitted:\n%s", args, out)
		}
	}
	if out := cliOK(t, dir, "get", "configmap", "app", "-o", "json"); !strings.Contains(out, `"app.conf": "x=1\n"`) ||
		!strings.Contains(out, `"resourceVersion": "1"`) || !strings.Contains(out, `"uid"`) {
		t.Errorf("get configmap -o json:\n%s", out)
	}

	if out := cliOK(t, dir, "delete", "configmap", "app"); out != "configmap \"app\" deleted from default namespace\n" {
		t.Errorf("delete: %q", out)
	}
	if out := cliOK(t, dir, "delete", "secret", "db"); out != "secret \"db\" deleted from default namespace\n" {
		t.Errorf("delete: %q", out)
	}
	for _, args := range [][]string{{"get", "configmap", "app"}, {"describe", "secret", "db"}, {"delete", "cm", "app"}} {
		out, errOut, code := runCLI(t, append([]string{"--data-dir", dir}, args...)...)
		kind := map[string]string{"configmap": "configmap", "secret": "secret", "cm": "configmap"}[args[1]]
		if code != 1 || out != "" || errOut != "error: "+kind+" \""+args[2]+"\" not found\n" {
			t.Errorf("%q after delete: code %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	// Refused applies name the document and never a value.
	os.WriteFile(file, []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: r}\ntype: kubernetes.io/dockerconfigjson\nstringData: {.dockerconfigjson: \""+marker+"\"}\n"), 0o600)
	_, errOut, code := runCLI(t, "--data-dir", dir, "apply", "-f", file)
	if code != 1 || !strings.Contains(errOut, `document 1: Secret "r": data[.dockerconfigjson]: Invalid value: "<secret contents redacted>"`) ||
		strings.Contains(errOut, marker) {
		t.Errorf("refused apply: %q", errOut)
	}
	if _, errOut, _ := runCLI(t, "--data-dir", dir, "get", "configmaps", "-n", "none"); errOut != "No resources found in none namespace.\n" {
		t.Errorf("empty namespace: %q", errOut)
	}
}

// init makes the secrets key, 0600; serve makes one for a hub made
// before, unless fleet.db already holds Secrets (their key is missing).
func TestSecretsKeyFile(t *testing.T) {
	dir := t.TempDir()
	cliOK(t, dir, "init")
	fi, err := os.Stat(filepath.Join(dir, "secrets.key"))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Fatalf("secrets.key: %v %v", fi, err)
	}
	if out := cliOK(t, dir, "init"); !strings.Contains(out, "nothing to do") {
		t.Errorf("init again: %q", out)
	}

	old := t.TempDir()
	serveAPI(t, old) // a hub initialised before: the key is made
	if _, err := os.Stat(filepath.Join(old, "secrets.key")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(old, "s.yaml")
	os.WriteFile(file, []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: v}\n"), 0o600)
	cliOK(t, old, "apply", "-f", file)
	os.Remove(filepath.Join(old, "secrets.key"))
	fleet, err := fleetdb.Open(filepath.Join(old, "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	h := hub.New(hub.Config{}, fleet, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := &cli{dataDir: old}
	err = c.loadSecretsKey(config{}, h.Objects(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "secrets key file "+filepath.Join(old, "secrets.key")+" is missing, but fleet.db holds 1 Secret(s)") {
		t.Errorf("missing key: %v", err)
	}
	if got := c.secretsKeyPath(config{SecretsKeyFile: "keys/s.key"}); got != filepath.Join(old, "keys/s.key") {
		t.Errorf("a relative secretsKeyFile: %s", got)
	}
	// secretsKeyFile in podhub.yaml names another file.
	other := filepath.Join(t.TempDir(), "k")
	if err := c.loadSecretsKey(config{SecretsKeyFile: other}, h.Objects(), slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Error("a new key was made while fleet.db holds Secrets")
	}
}
