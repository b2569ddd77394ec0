package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A store podhub cannot reach fails serve with an error that names it
// without its password, whether the password is in the URL's user
// information or a password= parameter.
func TestServeStoreErrorMasksThePassword(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hub")
	if _, errOut, code := runCLI(t, "--data-dir", dir, "init"); code != 0 {
		t.Fatal(errOut)
	}
	for _, store := range []string{
		"postgres://podhub:Sup3rSecretPw@127.0.0.1:1/fleet?connect_timeout=2",
		"postgresql://podhub@127.0.0.1:1/fleet?password=Sup3rSecretPw&connect_timeout=2",
	} {
		out, errOut, code := runCLI(t, "--data-dir", dir, "serve", "--mqtt-listen", "127.0.0.1:0", "--store", store)
		if code != 1 || !strings.Contains(errOut, "store postgres") || !strings.Contains(errOut, "xxxxx") {
			t.Errorf("--store %s: exit %d, stderr:\n%s", store, code, errOut)
		}
		if strings.Contains(out+errOut, "Sup3rSecretPw") {
			t.Errorf("--store %s: the password was printed:\n%s%s", store, out, errOut)
		}
	}
}

// A store of podhub.yaml: an empty one is the data directory's fleet.db,
// a relative SQLite path is under the data directory, a URL is itself.
func TestStoreOf(t *testing.T) {
	c := &cli{dataDir: "/var/lib/podhub"}
	for in, want := range map[string]string{
		"":                         "/var/lib/podhub/fleet.db",
		"other.db":                 "/var/lib/podhub/other.db",
		"sqlite:other.db":          "/var/lib/podhub/other.db",
		"sqlite:/srv/fleet.db":     "/srv/fleet.db",
		"sqlite:///srv/fleet.db":   "/srv/fleet.db",
		"/srv/fleet.db":            "/srv/fleet.db",
		"postgres://h/fleet":       "postgres://h/fleet",
		"postgresql://u@h:5433/db": "postgresql://u@h:5433/db",
	} {
		if got := c.storeOf(config{Store: in}); got != want {
			t.Errorf("store %q: %q, want %q", in, got, want)
		}
	}
}
