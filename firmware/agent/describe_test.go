package agent

import (
	"testing"

	"github.com/podvisor/podvisor/sync/protocol"
)

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		s    protocol.UpdateState
		want string
	}{
		{protocol.UpdateState{Kind: protocol.ReleaseFirmware, Version: "v2.1.0", Phase: protocol.UpdateInstalling, Percent: 40}, "firmware v2.1.0: Installing 40%"},
		{protocol.UpdateState{Kind: protocol.ReleaseAgent, Version: "v1.3.0", Phase: protocol.UpdateRolledBack, Reason: "v1.3.0 started 2 times without becoming ready"},
			"agent v1.3.0: RolledBack: v1.3.0 started 2 times without becoming ready"},
		{protocol.UpdateState{Kind: protocol.ReleaseAgent, Version: "v1.3.0", Phase: protocol.UpdateCommitted, Percent: 100}, "agent v1.3.0: Committed"},
	} {
		if got := Describe(c.s); got != c.want {
			t.Errorf("Describe = %q, want %q", got, c.want)
		}
	}
}
