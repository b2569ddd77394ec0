package schedule

import (
	"strings"
	"testing"

	"github.com/podvisor/podvisor/test/linked"
)

// The scheduler and its dependency k8s.io/component-helpers belong to the
// hub: the device daemon must not link them (binary size is a budget).
func TestDaemonDoesNotLinkTheScheduler(t *testing.T) {
	for _, pkg := range linked.Packages(t, "github.com/podvisor/podvisor/cmd/podvisor") {
		if strings.HasPrefix(pkg, "k8s.io/component-helpers") || strings.HasPrefix(pkg, "github.com/podvisor/podvisor/sync/hub") {
			t.Errorf("podvisor links %s", pkg)
		}
	}
}
