package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/supervisor/eviction"
)

// configReference is the device configuration reference, relative to
// this package.
const configReference = "../docs/configuration.md"

// readmeYAML is the first ```yaml block after the line that starts with
// heading in the configuration reference.
func readmeYAML(t *testing.T, readme, heading string) string {
	t.Helper()
	_, after, ok := strings.Cut(readme, "\n"+heading)
	if !ok {
		t.Fatalf("%s has no %q", configReference, heading)
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatalf("%s has no yaml block after %q", configReference, heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// The config reference (docs/configuration.md) stays true: its blocks load
// with this schema and validate, and every setting of the schema is in
// them.
func TestReadmeConfigReference(t *testing.T) {
	data, err := os.ReadFile(configReference)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	blocks := []string{readmeYAML(t, readme, "## Config file"), readmeYAML(t, readme, "The device's side, in podvisor's config:")}
	for _, block := range blocks {
		c, err := Parse([]byte(block))
		if err != nil {
			t.Fatalf("the reference's config does not load: %v\n%s", err, block)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("the reference's config is invalid: %v\n%s", err, block)
		}
	}
	doc := strings.Join(blocks, "")
	for _, key := range schemaKeys(reflect.TypeOf(Config{}), "") {
		name := key[strings.LastIndex(key, ".")+1:]
		if !strings.Contains(doc, name+":") {
			t.Errorf("%s does not show %s", configReference, key)
		}
	}
}

// The reference shows the defaults, all of them and nothing else: loaded,
// it is config.Default(). (eviction.hard is shown as what nil means, the
// kubelet's thresholds; settings whose empty value means "none" may show
// {} or [].)
func TestConfigReferenceIsTheDefault(t *testing.T) {
	data, err := os.ReadFile(configReference)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte(readmeYAML(t, string(data), "## Config file")))
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(c.Eviction.Hard, eviction.DefaultHard()) {
		c.Eviction.Hard = nil
	}
	got, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want, err := yaml.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s's reference is not config.Default():\n--- the reference\n%s\n--- Default()\n%s", configReference, got, want)
	}
}

// schemaKeys are the paths of every setting in t, a struct of this package.
func schemaKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		keys = append(keys, prefix+name)
		ft := f.Type
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
			keys = append(keys, schemaKeys(ft, prefix+name+".")...)
		}
	}
	return keys
}
