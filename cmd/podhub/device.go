package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/sync/seal"
)

// device manages devices' broker credentials: add issues them, revoke
// withdraws them.
func (c *cli) device(args []string) error {
	return runVerb("device", "podhub device add ID [--out DIR] [--install-dir DIR] [--url URL] | podhub device revoke ID", args,
		verb{"add", c.deviceAdd}, verb{"revoke", c.deviceRevoke})
}

// deviceAdd issues a device's certificate (common name = device ID) and
// writes the bundle the device needs: its certificate and key, the CA,
// the hub's public key and the podvisor config for them.
func (c *cli) deviceAdd(args []string) error {
	fs := flag.NewFlagSet("device add", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write the bundle to (default ./podvisor-ID; must not exist)")
	install := fs.String("install-dir", "/etc/podvisor/hub", "where the bundle's files will be on the device (for the config)")
	url := fs.String("url", "", "the broker's URL as the device reaches it (default from podhub.yaml)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: podhub device add ID [--out DIR] [--install-dir DIR] [--url URL]")
	}
	id := pos[0]
	if err := prepareDataDir(c.dataDir, false); err != nil {
		return err
	}
	if *out == "" {
		*out = "podvisor-" + id
	}
	if *url == "" {
		if *url, err = c.deviceURL(); err != nil {
			return err
		}
	}
	ca, err := pki.Load(c.pkiDir())
	if err != nil {
		return err
	}
	hubPub, err := os.ReadFile(c.path("hub.pub"))
	if err != nil {
		return fmt.Errorf("hub key (run podhub init): %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(c.pkiDir(), pki.CAFile))
	if err != nil {
		return err
	}
	if _, err := os.Lstat(*out); err == nil {
		return fmt.Errorf("--out %s: exists; name a new directory", *out)
	}
	issued, err := ca.IssueDevice(id)
	if err != nil {
		return err
	}
	// The device's sealing key: the hub seals its Secrets for it, and pins
	// the public half now, so that no one else can announce one for it.
	sealKey, err := seal.GenerateKey()
	if err != nil {
		return err
	}
	sealKeyFile, err := seal.MarshalPrivateKey(sealKey)
	if err != nil {
		return err
	}
	// Enrolment makes the device the operator's: the hub believes reports
	// only from devices it knows.
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if err := c.enrolInFleet(cfg, id, sealKey.Public().Bytes()); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	inst := func(name string) string { return filepath.Join(*install, name) }
	snippet := fmt.Sprintf(`hub:
  url: %s
  deviceId: %s
  key: %s
  sealKey: %s
  tls:
    ca: %s
    cert: %s
    key: %s
`, *url, id, inst("hub.pub"), inst("seal.key"), inst("ca.pem"), inst("device.pem"), inst("device.key"))
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{"device.key", issued.Key, 0o600}, {"seal.key", sealKeyFile, 0o600}, {"device.pem", issued.Cert, 0o644}, {"ca.pem", caPEM, 0o644},
		{"hub.pub", hubPub, 0o644}, {"podvisor.yaml", []byte(snippet), 0o644}} {
		if err := writeFileMode(filepath.Join(*out, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.out, "issued device %s a certificate (serial %x) and a sealing key (%s, pinned); its bundle is in %s\n",
		id, issued.Serial, fleetdb.SealKeyPrint(sealKey.Public().Bytes()), *out)
	fmt.Fprintf(c.out, "copy it to the device's %s (device.key and seal.key stay private) and add to podvisor's config:\n\n%s", *install, snippet)
	// A running podhub serve reads the device's enrolment again (a device
	// revoked before is trusted again); none running reads it at start.
	var r Revocations
	c.client().Do("POST", "/v1/broker/revocations", nil, &r)
	return nil
}

// deviceURL is the broker's address for devices: the external broker,
// or the embedded one's listen address (this host's name when it
// listens on every interface).
func (c *cli) deviceURL() (string, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return "", err
	}
	urls, err := cfg.brokers()
	if err != nil {
		return "", err
	}
	if len(urls) > 0 {
		// Every node of a cluster, comma-separated: the device's hub.url
		// takes them so.
		for i, u := range urls {
			urls[i] = strings.Replace(u, "mqtt://", "mqtts://", 1)
		}
		return strings.Join(urls, ","), nil
	}
	host, port, err := net.SplitHostPort(cfg.MQTTListen)
	if err != nil {
		return "", fmt.Errorf("mqttListen %q: %w", cfg.MQTTListen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if host, err = os.Hostname(); err != nil {
			return "", err
		}
	}
	return "mqtts://" + net.JoinHostPort(host, port), nil
}

// deviceRevoke revokes every certificate issued to the device and has a
// running podhub serve disconnect it at once.
func (c *cli) deviceRevoke(args []string) error {
	fs := flag.NewFlagSet("device revoke", flag.ContinueOnError)
	name, err := c.oneName(fs, args, "podhub device revoke ID")
	if err != nil {
		return err
	}
	ca, err := pki.Load(c.pkiDir())
	if err != nil {
		return err
	}
	serials, err := ca.Revoke(name)
	if err != nil {
		return err
	}
	// The hub ignores a revoked device's messages and gives it no
	// objects, whichever broker it connects through.
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if err := c.revokeInFleet(cfg, name); err != nil {
		return err
	}
	for _, s := range serials {
		fmt.Fprintf(c.out, "revoked certificate %x of device %s\n", s, name)
	}
	if len(serials) == 0 {
		fmt.Fprintf(c.out, "device %s's certificates were already revoked\n", name)
	}
	var r Revocations
	if err := c.client().Do("POST", "/v1/broker/revocations", nil, &r); err != nil {
		fmt.Fprintf(c.out, "podhub serve did not reload the list (%v); it refuses them when it starts.\n", err)
		fmt.Fprintf(c.out, "An external broker must load %s (Mosquitto: crlfile, then restart it).\n", filepath.Join(c.pkiDir(), pki.CRLFile))
		return nil
	}
	fmt.Fprintf(c.out, "podhub serve reloaded the revocation list; disconnected: %s\n", strings.Join(r.Disconnected, " "))
	return nil
}

// enrolInFleet adds the device to the fleet store with its pinned
// sealing key (beside a running podhub serve: SQLite in WAL mode takes
// both, as PostgreSQL does).
func (c *cli) enrolInFleet(cfg config, id string, sealKey []byte) error {
	fleet, err := c.openFleet(cfg)
	if err != nil {
		return err
	}
	defer fleet.Close()
	if err := fleet.AddDevice(id); err != nil {
		return fmt.Errorf("enrolling device %q: %w", id, err)
	}
	if err := fleet.EnrolSealKey(id, sealKey, time.Now()); err != nil {
		return fmt.Errorf("enrolling device %q: its sealing key: %w", id, err)
	}
	return nil
}

// revokeInFleet marks a device revoked in the fleet store.
func (c *cli) revokeInFleet(cfg config, id string) error {
	fleet, err := c.openFleet(cfg)
	if err != nil {
		return err
	}
	defer fleet.Close()
	if err := fleet.SetRevoked(id, time.Now()); err != nil {
		return fmt.Errorf("revoking device %q: %w", id, err)
	}
	return nil
}
