package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// readmeYAML is the first ```yaml block after the line that starts with
// heading in README.md.
func readmeYAML(t *testing.T, readme, heading string) string {
	t.Helper()
	_, after, ok := strings.Cut(readme, "\n"+heading)
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatalf("README.md has no yaml block after %q", heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// README.md's config reference stays true: its examples load with this
// schema and validate, and every setting of the schema is in them.
func TestReadmeConfigReference(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	doc := readmeYAML(t, readme, "### Config file") + readmeYAML(t, readme, "The device's side, in podvisor's config:")
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("README's config does not load: %v\n%s", err, doc)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("README's config is invalid: %v", err)
	}
	for _, key := range schemaKeys(reflect.TypeOf(Config{}), "") {
		name := key[strings.LastIndex(key, ".")+1:]
		if !strings.Contains(doc, name+":") {
			t.Errorf("README.md's config reference does not show %s", key)
		}
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
