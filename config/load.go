package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// MaxFileSize bounds a config file: a real one is a few KiB.
const MaxFileSize = 1 << 20

// Load reads the YAML (or JSON) config file at path over the defaults. A
// key the schema does not know is refused, not ignored: a misspelt
// setting would otherwise silently keep its default. Load does not
// validate: apply flags, then call Validate.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("config %s: larger than %d bytes", path, MaxFileSize)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c.File = path
	return c, nil
}

// Parse decodes a config document over the defaults, refusing unknown
// keys.
func Parse(data []byte) (*Config, error) {
	js, err := yaml.YAMLToJSONStrict(data) // duplicate keys refused
	if err != nil {
		return nil, err
	}
	c := Default()
	// Keys match the schema's case-sensitively, as in the kubelet's
	// config: encoding/json would take "allowunsigned" for allowUnsigned.
	strict, err := kjson.UnmarshalStrict(js, c)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	// The containerd section asks for containerd if it sets anything, even
	// a default value: decoded alone, it is not empty.
	var section struct {
		Containerd Containerd `json:"containerd"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &section); err != nil {
		return nil, err
	}
	c.containerdNamed = !reflect.DeepEqual(section.Containerd, Containerd{})
	c.fillEmpty()
	return c, nil
}

// fillEmpty gives back their defaults to settings written empty where
// empty has always meant the default (and for maxPods, as in the
// kubelet).
func (c *Config) fillEmpty() {
	d := Default()
	for _, s := range []struct{ value, def *string }{{&c.Manifests, &d.Manifests}, {&c.DataDir, &d.DataDir},
		{&c.Socket, &d.Socket}, {&c.ConfigDir, &d.ConfigDir}, {&c.Cgroups.Mount, &d.Cgroups.Mount},
		{&c.Containerd.SandboxDir, &d.Containerd.SandboxDir}} {
		if *s.value == "" {
			*s.value = *s.def
		}
	}
	if c.Node.MaxPods == 0 {
		c.Node.MaxPods = DefaultMaxPods
	}
	// The hub section's "0: the default" settings.
	if c.Hub.Heartbeat.Duration == 0 {
		c.Hub.Heartbeat = d.Hub.Heartbeat
	}
	if c.Hub.Outbox.MaxRows == 0 {
		c.Hub.Outbox.MaxRows = d.Hub.Outbox.MaxRows
	}
	if c.Hub.Outbox.MaxBytes.IsZero() {
		c.Hub.Outbox.MaxBytes = d.Hub.Outbox.MaxBytes
	}
	if c.Objects.MaxObjects == 0 {
		c.Objects.MaxObjects = d.Objects.MaxObjects
	}
	if c.Objects.MaxBytes.IsZero() {
		c.Objects.MaxBytes = d.Objects.MaxBytes
	}
	if len(c.ShutdownGracePeriodByPodPriority) == 0 {
		c.ShutdownGracePeriodByPodPriority = d.ShutdownGracePeriodByPodPriority
	}
}
