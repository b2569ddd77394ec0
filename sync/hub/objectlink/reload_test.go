package objectlink

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
)

// Two links on one fleet, as two replicas' (the second its own handle
// of the file). What one stores the other reads again when told
// (ReloadDevice), computing nothing; and one that was not told, whose
// index is behind, stores nothing over the other's: it reads the device
// again and computes on what is stored (the next generation).
func TestALinkReadsWhatAnotherStored(t *testing.T) {
	r := newLinkRig(t, DefaultLimits)
	r.device("gw")
	r.src.put(objects.ConfigMap, "default", "app", "1", 10)
	r.src.put(objects.ConfigMap, "default", "more", "1", 10)
	other, err := fleetdb.Open(filepath.Join(r.dir, "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	logs := &bytes.Buffer{}
	out := &sent{}
	b := New(Config{Key: r.priv, Source: source{r.src}}, other, out.publish, slog.New(slog.NewTextHandler(logs, nil)))

	r.pods("gw", volumePod("web", "app"))
	r.flush()
	genA, entriesA := r.link.Index("gw")
	if genA != 1 || len(entriesA) != 1 {
		t.Fatalf("link A's index: generation %d, %d entries; want 1 and 1", genA, len(entriesA))
	}
	b.loadDevice("gw") // what ReloadDevice has the indexer do
	if gen, entries := b.Index("gw"); gen != 1 || !SameEntries(entries, entriesA) {
		t.Fatalf("link B read generation %d %v, want A's 1 %v", gen, entries, entriesA)
	}
	if b.dirty["gw"] {
		t.Fatal("link B marked gw to compute again after reading what A stored")
	}

	// A stores generation 2; B, not told, is asked for gw's next pods.
	r.pods("gw", volumePod("web", "app"), volumePod("two", "more"))
	r.flush()
	b.DesiredChanged("gw", nil) // B's own change: gw's pods gone, say
	b.mu.Lock()
	dirty := b.dirty
	b.dirty = map[string]bool{}
	b.mu.Unlock()
	if failed := b.pass(dirty); failed {
		t.Fatal("a pass that met another replica's index counted as failed (it is read again at once)")
	}
	if len(out.take()) != 0 {
		t.Fatal("link B published an index over A's newer one")
	}
	b.mu.Lock()
	reread := b.reloadDevs["gw"] && b.dirty["gw"]
	b.mu.Unlock()
	if !reread {
		t.Fatal("link B did not mark gw to read again and compute after A's newer index")
	}
	b.loadDevice("gw")
	b.mu.Lock()
	dirty = b.dirty
	b.dirty, b.reloadDevs = map[string]bool{}, map[string]bool{}
	b.mu.Unlock()
	b.pass(dirty)
	if gen, entries := b.Index("gw"); gen != 2 || len(entries) != 2 {
		t.Fatalf("link B, after reading gw again: generation %d, %d entries; want A's 2 and 2 (gw's stored pods)", gen, len(entries))
	}
	if len(out.take()) != 0 {
		t.Fatal("link B published again the index A made")
	}
}
