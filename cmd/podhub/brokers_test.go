package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigBrokers(t *testing.T) {
	for _, c := range []struct {
		cfg  config
		want string // the URLs, or the error's words
	}{
		{config{}, ""},
		{config{Broker: "mqtts://a:8883"}, "mqtts://a:8883"},
		{config{Broker: "mqtts://a:8883, mqtts://b:8883"}, "mqtts://a:8883 mqtts://b:8883"},
		{config{Brokers: []string{"mqtt://a:1883", "mqtt://b:1883", "mqtt://c:1883"}}, "mqtt://a:1883 mqtt://b:1883 mqtt://c:1883"},
		{config{Broker: "mqtts://a:8883", Brokers: []string{"mqtts://b:8883"}}, "not both"},
		{config{Brokers: []string{"mqtts://a:8883", "mqtt://b:1883"}}, `"mqtt://b:1883": every broker must be mqtts://`},
		{config{Brokers: []string{"tcp://a:1883"}}, `"tcp://a:1883": want mqtt://`},
		{config{Brokers: []string{" "}}, "no URL"},
	} {
		urls, err := c.cfg.brokers()
		got := strings.Join(urls, " ")
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) || c.want == "" && got != "" {
			t.Errorf("%+v: %q, want %q", c.cfg, got, c.want)
		}
	}
}

// A device's bundle names every node of the hub's broker cluster, TLS.
func TestDeviceURLListsEveryBroker(t *testing.T) {
	dir := t.TempDir()
	c := &cli{dataDir: dir}
	os.WriteFile(filepath.Join(dir, "podhub.yaml"), []byte("brokers: [mqtt://mq1:8883, mqtt://mq2:8883]\n"), 0o600)
	if u, err := c.deviceURL(); err != nil || u != "mqtts://mq1:8883,mqtts://mq2:8883" {
		t.Errorf("deviceURL %q, %v", u, err)
	}
	os.WriteFile(filepath.Join(dir, "podhub.yaml"), []byte("broker: mqtt://mq1:8883\nbrokers: [mqtt://mq2:8883]\n"), 0o600)
	if _, err := c.deviceURL(); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("broker and brokers: %v", err)
	}
}
