package tlsconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClientErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	for _, c := range []struct {
		ca, cert, key, want string
	}{
		{filepath.Join(dir, "missing.pem"), "", "", "missing.pem"},
		{notPEM, "", "", "no certificate in it"},
		{"", "c.pem", "", "cert and key go together"},
		{"", filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), "c.pem"},
	} {
		if _, err := Client(c.ca, c.cert, c.key, ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Client(%q, %q, %q): %v, want %q", c.ca, c.cert, c.key, err, c.want)
		}
	}
	cfg, err := Client("", "", "", "broker.example")
	if err != nil || cfg.ServerName != "broker.example" || cfg.RootCAs != nil {
		t.Fatalf("no files: %+v %v", cfg, err)
	}
}
