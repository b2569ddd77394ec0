package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	f := fs.Bool("f", false, "")
	c := fs.String("c", "", "")
	pos, err := parseInterspersed(fs, []string{"web", "-f", "-c", "app"})
	if err != nil || len(pos) != 1 || pos[0] != "web" || !*f || *c != "app" {
		t.Fatalf("pos=%v f=%v c=%q err=%v", pos, *f, *c, err)
	}
	if _, err := parseInterspersed(fs, []string{"--bogus"}); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown flag error = %v", err)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	fc := defaultConfig()
	if err := loadConfig(write("manifest: /x\n"), &fc); err == nil || !strings.Contains(err.Error(), "manifest") {
		t.Fatalf("unknown key: %v", err)
	}
	for body, want := range map[string]string{
		"backoff: {initial: 1m, max: 10s}\n": "backoff.initial",
		"backoff: {reset: -1s}\n":            "backoff.reset",
		"logs: {maxSize: 1Ki}\n":             "logs.maxSize",
		"logs: {maxFiles: 0}\n":              "logs.maxFiles",
	} {
		fc := defaultConfig()
		if err := loadConfig(write(body), &fc); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if _, err := daemonConfig(fc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v does not name %s", body, err, want)
		}
	}
}

func TestUnknownCommandIsOneLine(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 1 || strings.Count(errb.String(), "\n") != 1 {
		t.Fatalf("code %d stderr %q", code, errb.String())
	}
}
