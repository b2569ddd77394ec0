package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/seal"
	"github.com/podvisor/podvisor/test/pgtest"
)

// podhub device add writes the device's sealing key (0600) beside its
// certificate, names it in the config (hub.sealKey) and pins its public
// half in the fleet store (fleet.db, or the PostgreSQL database
// podhub.yaml's store: names); revoke marks the device revoked there, and
// adding it again pins a new key and lifts that.
func TestDeviceAddMakesAPinnedSealingKey(t *testing.T) {
	pgtest.EachStore(t, testDeviceAddMakesAPinnedSealingKey)
}

func testDeviceAddMakesAPinnedSealingKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hub")
	if _, errOut, code := runCLI(t, "--data-dir", dir, "init"); code != 0 {
		t.Fatal(errOut)
	}
	store := filepath.Join(dir, "fleet.db")
	if u := pgtest.Store(t); strings.Contains(u, "://") {
		store = u
		f, err := os.OpenFile(filepath.Join(dir, "podhub.yaml"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("store: " + u + "\n")
		f.Close()
	}
	add := func(out string) string {
		t.Helper()
		stdout, errOut, code := runCLI(t, "--data-dir", dir, "device", "add", "gw-1", "--out", out, "--install-dir", "/etc/podvisor/hub", "--url", "mqtts://hub:8883")
		if code != 0 {
			t.Fatalf("device add: %s", errOut)
		}
		return stdout
	}
	bundle := filepath.Join(t.TempDir(), "gw-1")
	out := add(bundle)
	fi, err := os.Stat(filepath.Join(bundle, "seal.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("seal.key: %v %v", fi, err)
	}
	key, err := seal.LoadPrivateKey(filepath.Join(bundle, "seal.key"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(bundle, "podvisor.yaml"))
	if !strings.Contains(string(cfg), "hub:\n") || !strings.Contains(string(cfg), "\n  sealKey: /etc/podvisor/hub/seal.key\n") {
		t.Fatalf("config:\n%s", cfg)
	}
	fp := fleetdb.SealKeyPrint(key.Public().Bytes())
	if !strings.Contains(out, fp) {
		t.Fatalf("output does not name the key's fingerprint %s:\n%s", fp, out)
	}
	pinned := func() (string, bool) {
		f, err := fleetdb.OpenStore(store)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pub, revoked, err := f.SealingKey("gw-1")
		if err != nil {
			t.Fatal(err)
		}
		return fleetdb.SealKeyPrint(pub), revoked
	}
	if p, revoked := pinned(); p != fp || revoked {
		t.Fatalf("pinned %s revoked %v, want %s", p, revoked, fp)
	}
	if _, errOut, code := runCLI(t, "--data-dir", dir, "device", "revoke", "gw-1"); code != 0 {
		t.Fatal(errOut)
	}
	if _, revoked := pinned(); !revoked {
		t.Fatal("not revoked in fleet.db")
	}
	again := filepath.Join(t.TempDir(), "gw-1")
	add(again)
	key2, err := seal.LoadPrivateKey(filepath.Join(again, "seal.key"))
	if err != nil {
		t.Fatal(err)
	}
	if p, revoked := pinned(); p != fleetdb.SealKeyPrint(key2.Public().Bytes()) || revoked {
		t.Fatal("enrolled again: the new key is not pinned, or still revoked")
	}
}

// describe device shows the key by fingerprint, a refused key, the
// revocation, the index and what it leaves out; never key bytes.
func TestDescribeDeviceObjects(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var b strings.Builder
	describeObjects(&b, nil, now)
	if !strings.Contains(b.String(), "Sealing key:\t<none>") {
		t.Fatalf("no key:\n%s", b.String())
	}
	b.Reset()
	describeObjects(&b, &fleetdb.DeviceObjects{SealKey: []byte("KEYBYTES"), SealKeyFingerprint: "sha256:aa", SealKeySource: fleetdb.SealKeyEnrolled,
		SealKeyAt: now.Add(-time.Hour), RefusedKey: "sha256:bb", RefusedAt: now.Add(-time.Minute), RevokedAt: now.Add(-time.Second),
		Generation: 3, Entries: []protocol.ObjectEntry{{Kind: "Secret", Namespace: "default", Name: "db", UID: "u1", ResourceVersion: "7"}},
		Omitted: []string{"ConfigMap default/big: over the device's limit"}}, now)
	out := b.String()
	for _, want := range []string{"Sealing key:\tsha256:aa (enrolled 60m ago, pinned)", "Sealing key refused:\tsha256:bb, announced 60s ago",
		"Revoked:\t1s ago", "Objects:\tgeneration 3, 1 object(s)", "Object Secret default/db:\tuid u1, resourceVersion 7",
		"Object left out:\tConfigMap default/big: over the device's limit"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "KEYBYTES") {
		t.Fatal("key bytes shown")
	}
}
