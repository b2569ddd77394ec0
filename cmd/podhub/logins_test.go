package main

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/sync/pki"
)

func initHub(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "hub")
	if _, errOut, code := runCLI(t, "--data-dir", dir, "init"); code != 0 {
		t.Fatalf("init: %s", errOut)
	}
	return dir
}

// readKubeconfig reads a kubeconfig the CLI wrote, checking its mode.
func readKubeconfig(t *testing.T, path string) kubeconfigDoc {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig %s: %v %v, want mode 0600", path, err, fi)
	}
	data, _ := os.ReadFile(path)
	var doc kubeconfigDoc
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		t.Fatalf("kubeconfig: %v\n%s", err, data)
	}
	if doc.CurrentContext != "podhub" || len(doc.Clusters) != 1 || doc.Clusters[0].Name != "podhub" ||
		len(doc.Contexts) != 1 || doc.Contexts[0].Context.Cluster != "podhub" || len(doc.Users) != 1 ||
		doc.Contexts[0].Context.User != doc.Users[0].Name || !strings.Contains(string(doc.Clusters[0].Cluster.CertificateAuthorityData), "BEGIN CERTIFICATE") {
		t.Errorf("kubeconfig:\n%s", data)
	}
	return doc
}

// kubectlAccepts has the machine's kubectl (if any) read the file.
func kubectlAccepts(t *testing.T, path, want string) {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("no kubectl here: the kubeconfig is checked by its schema only")
		return
	}
	out, err := exec.Command(kubectl, "config", "view", "--kubeconfig", path, "--raw", "-o", "jsonpath={.users[0].name} {.clusters[0].cluster.server}").CombinedOutput()
	if err != nil || string(out) != want {
		t.Errorf("kubectl config view: %v %q, want %q", err, out, want)
	}
}

func TestTokenCreateListDelete(t *testing.T) {
	dir := initHub(t)
	kc := filepath.Join(t.TempDir(), "ci.kubeconfig")
	if _, errOut, code := runCLI(t, "--data-dir", dir, "token", "create", "ci", "--kubeconfig", kc); code != 1 || !strings.Contains(errOut, "--server") {
		t.Errorf("no http.listen and no --server: %d %q", code, errOut)
	}
	out, errOut, code := runCLI(t, "--data-dir", dir, "token", "create", "ci", "--kubeconfig", kc, "--server", "https://hub.example:8443")
	if code != 0 {
		t.Fatalf("token create: %s", errOut)
	}
	token, _, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(token, "podhub_") || len(token) < 40 {
		t.Errorf("token create printed %q", out)
	}
	doc := readKubeconfig(t, kc)
	if doc.Users[0].User.Token != token || doc.Clusters[0].Cluster.Server != "https://hub.example:8443" {
		t.Errorf("kubeconfig user %+v server %q", doc.Users[0], doc.Clusters[0].Cluster.Server)
	}
	kubectlAccepts(t, kc, "podhub-ci https://hub.example:8443")
	stored, _ := os.ReadFile(filepath.Join(dir, tokenFile))
	if strings.Contains(string(stored), token) {
		t.Error("the token file holds the token itself")
	}
	if fi, _ := os.Stat(filepath.Join(dir, tokenFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode())
	}
	if _, errOut, code := runCLI(t, "--data-dir", dir, "token", "create", "ci"); code != 1 || !strings.Contains(errOut, "exists") {
		t.Errorf("a second token ci: %d %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "--data-dir", dir, "token", "create", "two", "--kubeconfig", kc, "--server", "https://x:1"); code != 1 || !strings.Contains(errOut, "exists") {
		t.Errorf("over an existing kubeconfig: %d %q", code, errOut)
	}
	if out, _, _ := runCLI(t, "--data-dir", dir, "token", "list"); !strings.HasPrefix(out, "NAME ") || !strings.Contains(out, "\nci ") || strings.Contains(out, "two") {
		t.Errorf("token list:\n%s", out)
	}
	if out, errOut, code := runCLI(t, "--data-dir", dir, "token", "delete", "ci"); code != 0 || out != "token \"ci\" deleted\n" {
		t.Errorf("token delete: %d %q %q", code, out, errOut)
	}
	if out, _, _ := runCLI(t, "--data-dir", dir, "token", "list"); out != "No tokens.\n" {
		t.Errorf("token list after delete: %q", out)
	}
	if _, errOut, code := runCLI(t, "--data-dir", dir, "token", "delete", "ci"); code != 1 || !strings.Contains(errOut, "no such token") {
		t.Errorf("deleting it again: %d %q", code, errOut)
	}
}

func TestUserAddRevoke(t *testing.T) {
	dir := initHub(t)
	if err := os.WriteFile(filepath.Join(dir, "podhub.yaml"), []byte("http:\n  listen: \"127.0.0.1:8443\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "alice.kubeconfig")
	if _, errOut, code := runCLI(t, "--data-dir", dir, "user", "add", "alice", "--kubeconfig", kc); code != 0 {
		t.Fatalf("user add: %s", errOut)
	}
	doc := readKubeconfig(t, kc)
	if doc.Clusters[0].Cluster.Server != "https://127.0.0.1:8443" || doc.Users[0].User.Token != "" {
		t.Errorf("kubeconfig %+v", doc)
	}
	block, _ := pem.Decode(doc.Users[0].User.ClientCertificateData)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || cert.Subject.CommonName != "alice" || !pki.IsUser(cert) || len(doc.Users[0].User.ClientKeyData) == 0 {
		t.Errorf("the user's certificate: %v %v", err, cert.Subject)
	}
	kubectlAccepts(t, kc, "podhub-alice https://127.0.0.1:8443")
	if _, errOut, code := runCLI(t, "--data-dir", dir, "user", "add", "alice", "--kubeconfig", kc+"2"); code != 1 || !strings.Contains(errOut, "revoke it first") {
		t.Errorf("a second certificate: %d %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "--data-dir", dir, "device", "add", "alice", "--out", filepath.Join(t.TempDir(), "b")); code != 1 || !strings.Contains(errOut, "user") {
		t.Errorf("a device named as a user: %d %q", code, errOut)
	}
	if out, errOut, code := runCLI(t, "--data-dir", dir, "user", "revoke", "alice"); code != 0 || !strings.Contains(out, "revoked certificate") {
		t.Errorf("user revoke: %d %q %q", code, out, errOut)
	}
	ca, _ := pki.Load(filepath.Join(dir, "pki"))
	if set, _ := ca.Revoked(); !set.Has(cert.SerialNumber) {
		t.Error("the CRL does not list the revoked user's certificate")
	}
	if _, errOut, code := runCLI(t, "--data-dir", dir, "user", "add", "alice", "--kubeconfig", kc+"3"); code != 0 {
		t.Errorf("a new certificate after revocation: %s", errOut)
	}
}

func TestServeHTTPSettingsChecked(t *testing.T) {
	for yamlText, want := range map[string]string{
		"http:\n  listen: \"8443\"\n":                          "http.listen",
		"http:\n  listen: \":8443\"\n  certFile: /x.crt\n":     "give both or neither",
		"http:\n  listen: \":8443\"\n  names: [\"a b\"]\n":     "http.names",
		"http:\n  listen: \":8443\"\n  bogus: 1\n":             "bogus",
		"mqttListen: \"127.0.0.1:0\"\nhttp:\n  listen: 8443\n": "listen",
	} {
		dir := initHub(t)
		if err := os.WriteFile(filepath.Join(dir, "podhub.yaml"), []byte(yamlText), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := runCLI(t, "--data-dir", dir, "serve"); code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("%q: %d %q, want an error naming %q", yamlText, code, errOut, want)
		}
	}
	dir := initHub(t)
	if _, errOut, code := runCLI(t, "--data-dir", dir, "serve", "--http-listen", "nope"); code != 1 || !strings.Contains(errOut, "http.listen \"nope\"") {
		t.Errorf("--http-listen nope: %d %q", code, errOut)
	}
}

// A listener that cannot open stops serve with its error, nothing left
// running.
func TestServeFailsOnABusyHTTPSAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := initHub(t)
	_, errOut, code := runCLI(t, "--data-dir", dir, "serve", "--mqtt-listen", "127.0.0.1:0", "--http-listen", busy.Addr().String())
	if code != 1 || !strings.Contains(errOut, "HTTPS listener") || !strings.Contains(errOut, "address already in use") {
		t.Errorf("serve on a busy address: %d %q", code, errOut)
	}
}
