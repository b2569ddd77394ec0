package layers

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every table in a podvisor database has one owning package: the one
// that creates it. Only its owner reads or writes it, so that a table's
// schema, its migrations and every query on it change in one place (the
// daemon's state.db holds two owners' tables: supervisor/state's pods
// and instances, sync/store's desired documents and outbox).
var (
	createTable = regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?([a-z_]+)`)
	tableUse    = regexp.MustCompile(`(?i)\b(?:FROM|INTO|UPDATE|JOIN|TABLE)\s+([a-z_]+)\b`)
	// Queries are string literals; comments that say "from pods" are not.
	stringLiteral = regexp.MustCompile("`[^`]*`|\"(?:[^\"\\\\\n]|\\\\.)*\"")
)

func TestEachTableHasOneOwningPackage(t *testing.T) {
	sources := map[string]string{} // file → text, non-test Go files of the module
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "test" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sources[filepath.ToSlash(strings.TrimPrefix(path, "../../"))] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{} // table → package folder
	for file, text := range sources {
		for _, m := range createTable.FindAllStringSubmatch(literals(text), -1) {
			dir := filepath.Dir(file)
			if o, ok := owner[m[1]]; ok && o != dir {
				t.Errorf("table %s is created by both %s and %s", m[1], o, dir)
			}
			owner[m[1]] = dir
		}
	}
	for _, want := range []string{"pods", "container_instances", "outbox", "hub_desired", "devices", "workloads"} {
		if _, ok := owner[want]; !ok {
			t.Errorf("found no CREATE TABLE %s: the test no longer sees the schemas it guards", want)
		}
	}
	files := make([]string, 0, len(sources))
	for f := range sources {
		files = append(files, f)
	}
	slices.Sort(files)
	for _, file := range files {
		for _, m := range tableUse.FindAllStringSubmatch(literals(sources[file]), -1) {
			o, ok := owner[m[1]]
			if ok && o != filepath.Dir(file) {
				t.Errorf("%s uses table %s, which belongs to %s", file, m[1], o)
			}
		}
	}
}

// literals are the string literals of a Go file, one per line.
func literals(text string) string {
	return strings.Join(stringLiteral.FindAllString(text, -1), "\n")
}
