package store

import (
	"bytes"
	"path/filepath"
	"testing"
)

// Objects and their index survive a reopen; a new index drops the
// objects it names in the same transaction.
func TestObjectsSurviveReopenAndDrop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, DefaultLimits)
	if _, ok, err := s.ObjectIndex(); ok || err != nil {
		t.Fatalf("an empty store has an index: %v %v", ok, err)
	}
	all := func(string) bool { return true }
	if _, err := s.SetObjectIndex(1, []byte("index 1"), all); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Secret/default/db", "ConfigMap/default/app"} {
		if err := s.SaveObject(k, []byte("sealed "+k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SaveObject("Secret/default/db", []byte("sealed v2")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path, DefaultLimits)
	doc, ok, err := s.ObjectIndex()
	if err != nil || !ok || string(doc) != "index 1" {
		t.Fatalf("index after reopen: %q %v %v", doc, ok, err)
	}
	objs, err := s.Objects()
	if err != nil || len(objs) != 2 || !bytes.Equal(objs["Secret/default/db"], []byte("sealed v2")) {
		t.Fatalf("objects after reopen: %q %v", objs, err)
	}
	drop, err := s.SetObjectIndex(2, []byte("index 2"), func(k string) bool { return k != "Secret/default/db" })
	if err != nil || len(drop) != 1 || drop[0] != "Secret/default/db" {
		t.Fatalf("dropped %q %v", drop, err)
	}
	if err := s.DeleteObject("ConfigMap/default/none"); err != nil {
		t.Fatal(err)
	}
	objs, _ = s.Objects()
	doc, _, _ = s.ObjectIndex()
	if len(objs) != 1 || objs["ConfigMap/default/app"] == nil || string(doc) != "index 2" {
		t.Fatalf("after the drop: %q, index %q", objs, doc)
	}
}

// The objects' tables are additive: a release that predates them still
// opens the database (a self-update's rollback).
func TestObjectTablesAreAdditive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	open(t, path, DefaultLimits).Close()
	saved := migrations
	t.Cleanup(func() { migrations = saved })
	migrations = migrations[:2]
	s, err := Open(path, DefaultLimits)
	if err != nil {
		t.Fatalf("a release without the object tables: %v", err)
	}
	s.Close()
}
