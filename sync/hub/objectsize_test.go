package hub_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/objects"
)

// An object of the API server's largest size (1 MiB of data) reaches
// its device through the embedded broker in one message.
func TestLargestObjectReachesTheDevice(t *testing.T) {
	r := newTLSRig(t)
	a := r.device("gw-a")
	a.announce()
	value := strings.Repeat("x", 1<<20-len("big"))
	r.src.set(objects.Secret, "db", "1", map[string]string{"big": value})
	if _, err := r.hub.Apply("gw-a", []json.RawMessage{objPod("web", "db")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "A's index", func() bool { ix := a.lastIndex(); return ix != nil && len(ix.Entries) == 1 })
	eventually(t, 10*time.Second, "A's pinned key", func() bool { pub, _, _ := r.fleet.SealingKey("gw-a"); return len(pub) > 0 })
	a.ask(a.lastIndex().Entries...)
	eventually(t, 10*time.Second, "the 1 MiB Secret at A", func() bool { return a.object("Secret/default/db") != nil })
	if got := a.object("Secret/default/db").data["big"]; string(got) != value {
		t.Fatalf("%d bytes, want %d", len(got), len(value))
	}
}
