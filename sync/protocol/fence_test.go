package protocol

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

// A fence travels signed with its document; a malformed one refuses the
// document whole.
func TestFenceSignedAndChecked(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	raw, err := Sign(Desired{Device: "gw", Generation: 3, Fence: &Fence{Since: since, Pods: []string{"default/web", "db/db-0"}}}, priv)
	if err != nil {
		t.Fatal(err)
	}
	d, err := OpenDesired(raw, "gw", pub, false)
	if err != nil || d.Fence == nil || len(d.Fence.Pods) != 2 || !d.Fence.Since.Equal(since) {
		t.Fatalf("opened %+v, %v", d, err)
	}
	// Unfenced documents carry no fence field at all.
	plain, _ := Sign(Desired{Device: "gw", Generation: 4}, priv)
	if strings.Contains(string(plain), "fence") {
		t.Fatalf("an unfenced document names a fence: %s", plain)
	}
	for _, bad := range [][]string{{"web"}, {"/web"}, {"default/"}, {"a/b/c"}} {
		raw, _ := Sign(Desired{Device: "gw", Generation: 5, Fence: &Fence{Pods: bad}}, priv)
		if _, err := OpenDesired(raw, "gw", pub, false); err == nil || !strings.Contains(err.Error(), "fence") {
			t.Errorf("fence %q: %v, want refused", bad, err)
		}
	}
}

// The hub's receipt echoes the heartbeat's number.
func TestBeatEchoed(t *testing.T) {
	hb, err := DecodeHeartbeat(Encode(&Heartbeat{Device: "gw", Beat: 1 << 62}))
	if err != nil || hb.Beat != 1<<62 {
		t.Fatalf("heartbeat %+v, %v", hb, err)
	}
	ack, err := DecodeStatusAck(Encode(&StatusAck{Epoch: "e", Seq: 2, Beat: hb.Beat}))
	if err != nil || ack.Beat != hb.Beat {
		t.Fatalf("receipt %+v, %v", ack, err)
	}
}
