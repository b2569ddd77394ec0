package e2e

import (
	"strings"
	"testing"
	"time"
)

// Two daemons started with one device ID (a cloned image) are shown
// DuplicateID by podhub, with an event naming both installations, not
// merged into one Ready device.
func TestDuplicateDeviceIDShownByPodhub(t *testing.T) {
	h := newPodhub(t)
	// One enrolment copied into two images: the same certificate, key
	// and device ID.
	_, cloned := h.enrol(t, "clone-1")
	for range 2 {
		d := newDaemon(t)
		d.withConfig(cloned + "  heartbeat: 1s\n")
		d.start()
	}
	waitForLong(t, 60*time.Second, "clone-1 shown DuplicateID", func() bool {
		out, _ := h.cli("get", "devices")
		return strings.Contains(out, "clone-1") && strings.Contains(out, "DuplicateID")
	})
	out, _ := h.cli("describe", "device", "clone-1")
	if !strings.Contains(out, "DuplicateID") || !strings.Contains(out, "two installations") {
		t.Fatalf("describe device clone-1:\n%s", out)
	}
}
