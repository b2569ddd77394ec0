package objectlink

import (
	"fmt"
	"testing"

	"github.com/podvisor/podvisor/sync/protocol"
)

func ref(name, rv string) protocol.ObjectEntry {
	return protocol.ObjectEntry{Kind: "ConfigMap", Namespace: "default", Name: name, UID: "u-" + name, ResourceVersion: rv}
}

// A fleet asking at once is queued whole, in order, each device once.
func TestRequestQueueKeepsEveryDeviceOnce(t *testing.T) {
	q := newRequestQueue()
	const devices = 5000
	for i := 0; i < devices; i++ {
		q.add(fmt.Sprintf("dev-%d", i), []protocol.ObjectEntry{ref("app", "1")})
	}
	// Devices asking again before their turn add nothing; their newest
	// version of a ref wins and new refs merge.
	q.add("dev-7", []protocol.ObjectEntry{ref("app", "2"), ref("db", "1")})
	if q.len() != devices {
		t.Fatalf("%d devices waiting, want %d", q.len(), devices)
	}
	for i := 0; i < devices; i++ {
		dev, refs, ok := q.next()
		if !ok || dev != fmt.Sprintf("dev-%d", i) {
			t.Fatalf("turn %d: %s %v", i, dev, ok)
		}
		if dev == "dev-7" {
			if len(refs) != 2 || refs[0].Name != "app" || refs[0].ResourceVersion != "2" || refs[1].Name != "db" {
				t.Fatalf("dev-7's merged refs: %+v", refs)
			}
		} else if len(refs) != 1 {
			t.Fatalf("%s: %+v", dev, refs)
		}
	}
	if _, _, ok := q.next(); ok || q.len() != 0 {
		t.Fatal("the queue is not empty")
	}
}

func TestRequestQueueBoundsADevice(t *testing.T) {
	q := newRequestQueue()
	for i := 0; i < protocol.MaxObjectEntries+10; i++ {
		q.add("dev", []protocol.ObjectEntry{ref(fmt.Sprintf("o%d", i), "1")})
	}
	if _, refs, _ := q.next(); len(refs) != protocol.MaxObjectEntries {
		t.Fatalf("%d refs kept, want %d", len(refs), protocol.MaxObjectEntries)
	}
}
