package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The hub section's security settings are checked before anything
// starts, and a bad one is named.
func TestHubSecurityConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	load := func(body string) fileConfig {
		t.Helper()
		os.WriteFile(path, []byte(body), 0o644)
		fc := defaultConfig()
		if err := loadConfig(path, &fc); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		return fc
	}
	for body, want := range map[string][]string{
		"hub: {url: mqtt://h:1883, key: /etc/podvisor/hub.pub, allowUnsigned: true}\n": {"hub.allowUnsigned", "hub.key", "/etc/podvisor/hub.pub"},
		"hub: {podSecurity: strict}\n":                      {"hub.podSecurity", `"strict"`, "privileged, baseline, restricted"},
		"hub: {podSecurityVersion: '1.30'}\n":               {"hub.podSecurityVersion", `"latest" or "v1.x"`},
		"hub: {allowRootProcessPods: true}\n":               {"hub.allowRootProcessPods", "allowProcessPods"},
		"hub: {images: {registries: [ghcr.io, busybox]}}\n": {"hub.images.registries[1]", `"busybox"`},
	} {
		_, err := daemonConfig(load(body))
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %v does not say %s", body, err, w)
			}
		}
	}

	// --hub-key given on the command line over allowUnsigned in the file.
	fc := load("hub: {url: mqtt://h:1883, allowUnsigned: true}\n")
	if _, err := daemonConfig(fc); err != nil {
		t.Fatalf("allowUnsigned alone: %v", err)
	}
	fc.Hub.Key = "/tmp/hub.pub"
	if _, err := daemonConfig(fc); err == nil || !strings.Contains(err.Error(), "hub.allowUnsigned") {
		t.Fatalf("allowUnsigned with --hub-key: %v", err)
	}

	cfg, err := daemonConfig(load("hub: {podSecurity: restricted, podSecurityVersion: v1.30, allowProcessPods: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy.Hub == nil || cfg.Policy.Hub.Level() != "restricted:v1.30" {
		t.Fatalf("hub pod policy %+v", cfg.Policy.Hub)
	}
	cfg, err = daemonConfig(load(""))
	if err != nil || cfg.Policy.Hub.Level() != "baseline:latest" {
		t.Fatalf("default hub pod policy: %v %v", cfg.Policy.Hub, err)
	}
}
