package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/tlsconfig"
)

// config is <data-dir>/podhub.yaml, written by init.
type config struct {
	MQTTListen    string `json:"mqttListen,omitempty"`
	Broker        string `json:"broker,omitempty"`
	Prefix        string `json:"prefix,omitempty"`
	DeviceTimeout string `json:"deviceTimeout,omitempty"`
	Username      string `json:"username,omitempty"`
	PasswordFile  string `json:"passwordFile,omitempty"`
	TLS           struct {
		CA   string `json:"ca,omitempty"`
		Cert string `json:"cert,omitempty"`
		Key  string `json:"key,omitempty"`
	} `json:"tls"`
}

// init makes the hub's signing key (hub.key; hub.pub goes to devices)
// and a config with the defaults.
func (c *cli) init(args []string) error {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	if _, err := flags(fs, args); err != nil {
		return err
	}
	if _, err := os.Stat(c.path("hub.key")); err == nil {
		return fmt.Errorf("init: %s exists; a new key would make every device refuse this hub", c.path("hub.key"))
	}
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path("hub.key"), protocol.EncodePrivateKey(priv), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(c.path("hub.pub"), protocol.EncodePublicKey(pub), 0o644); err != nil {
		return err
	}
	cfg := "# podhub serve's settings; its flags override them.\nmqttListen: \":1883\"   # the embedded broker; or broker: mqtts://HOST:PORT for an external one\ndeviceTimeout: 90s     # a device silent this long is NotReady\n"
	if _, err := os.Stat(c.path("podhub.yaml")); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(c.path("podhub.yaml"), []byte(cfg), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.out, "wrote %s (keep it secret) and %s (give it to devices: podvisor run --hub-key)\n", c.path("hub.key"), c.path("hub.pub"))
	return nil
}

func (c *cli) serve(ctx context.Context, args []string) error {
	cfg := config{MQTTListen: ":1883", DeviceTimeout: "90s"}
	if data, err := os.ReadFile(c.path("podhub.yaml")); err == nil {
		if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
			return fmt.Errorf("%s: %w", c.path("podhub.yaml"), err)
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("mqtt-listen", "", "the embedded broker's address (default :1883)")
	broker := fs.String("broker", "", "an external broker, mqtt://HOST:PORT or mqtts://HOST:PORT, instead of the embedded one")
	timeout := fs.String("device-timeout", "", "a device silent this long is NotReady (default 90s)")
	if _, err := flags(fs, args); err != nil {
		return err
	}
	if *listen != "" {
		cfg.MQTTListen, cfg.Broker = *listen, ""
	}
	if *broker != "" {
		cfg.Broker = *broker
	}
	if *timeout != "" {
		cfg.DeviceTimeout = *timeout
	}
	deviceTimeout, err := time.ParseDuration(cfg.DeviceTimeout)
	if err != nil || deviceTimeout <= 0 {
		return fmt.Errorf("device timeout %q: want a positive duration", cfg.DeviceTimeout)
	}
	key, err := readPrivateKey(c.path("hub.key"))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.errOut, nil))
	url := cfg.Broker
	if url == "" {
		b, err := hub.StartBroker(cfg.MQTTListen, log)
		if err != nil {
			return err
		}
		defer b.Close()
		host, port, _ := strings.Cut(cfg.MQTTListen, ":")
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		url = "mqtt://" + host + ":" + port
		log.Info("embedded MQTT broker listening", "address", cfg.MQTTListen)
	}
	fleet, err := hub.OpenFleet(c.path("fleet.db"))
	if err != nil {
		return err
	}
	defer fleet.Close()
	hcfg := hub.Config{Broker: url, Prefix: cfg.Prefix, Key: key, Username: cfg.Username}
	if cfg.PasswordFile != "" {
		pw, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return err
		}
		hcfg.Password = strings.TrimSpace(string(pw))
	}
	if strings.HasPrefix(url, "mqtts://") {
		if hcfg.TLS, err = tlsconfig.Client(cfg.TLS.CA, cfg.TLS.Cert, cfg.TLS.Key, ""); err != nil {
			return err
		}
	}
	h := hub.New(hcfg, fleet, log)
	if err := h.Start(10 * time.Second); err != nil {
		return fmt.Errorf("broker %s: %w", url, err)
	}
	defer h.Close()
	api := &hub.API{Hub: h, Fleet: fleet, Timeout: deviceTimeout}
	log.Info("podhub serving", "broker", url, "api", c.path("podhub.sock"), "data", c.dataDir)
	return api.ServeUnix(ctx, c.path("podhub.sock"))
}

func readPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hub key (run podhub init first): %w", err)
	}
	priv, err := protocol.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("hub key %s: %w", path, err)
	}
	return priv, nil
}
