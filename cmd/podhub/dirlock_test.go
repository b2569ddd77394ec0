package main

import (
	"strings"
	"testing"
)

// The data directory's replica lock: a second podhub serve on one data
// directory is refused at once, and the next process there learns the
// nonce its predecessor kept.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	first, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if first.predecessor != "" {
		t.Errorf("a fresh data directory's predecessor %q, want none", first.predecessor)
	}
	if err := first.keep("0123abcd"); err != nil {
		t.Fatal(err)
	}
	if _, err := lockDataDir(dir); err == nil || !strings.Contains(err.Error(), "another podhub serve runs with this data directory") {
		t.Fatalf("a second lock while the first is held: %v, want refused", err)
	}
	first.unlock() // as at exit, or a kill -9 closing the file
	next, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("the lock after the first process ended: %v", err)
	}
	defer next.unlock()
	if next.predecessor != "0123abcd" {
		t.Errorf("predecessor %q, want the nonce the first kept", next.predecessor)
	}
}
