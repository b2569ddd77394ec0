package protocol

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestFindNUL(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{`{"a":"b"}`, -1},
		{`{"a":"\u0000"}`, 6},
		{`{"a":"x\\u0000"}`, -1},  // an escaped backslash, then text
		{`{"a":"\\\u0000"}`, 8},   // an escaped backslash, then a NUL
		{`{"a":"\\\\u0000"}`, -1}, // two escaped backslashes, then text
		{`{"a":"\u00000"}`, 6},    // NUL then "0"
		{`{"a":"\u0001\u0000"}`, 12},
		{"{\"a\":\"\x00\"}", 6},
		{`\u0000`, 0},
		{`u0000`, -1},
	} {
		if got := FindNUL([]byte(c.in)); got != c.want {
			t.Errorf("FindNUL(%s) = %d, want %d", c.in, got, c.want)
		}
	}
}

// A heartbeat whose Node status carries a NUL deep inside is refused,
// naming the kind: the hub's PostgreSQL store could not keep it.
func TestHeartbeatWithNULRefused(t *testing.T) {
	hb := &Heartbeat{Device: "gw", Beat: 1}
	hb.Node.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Message: "ok\x00then"}}
	_, err := DecodeHeartbeat(Encode(hb))
	if err == nil || !strings.Contains(err.Error(), "heartbeat: a NUL character") {
		t.Fatalf("heartbeat with a NUL in a condition message: got %v, want a refusal naming the heartbeat", err)
	}
	hb.Node.Conditions[0].Message = `a \u0000 quoted`
	if _, err := DecodeHeartbeat(Encode(hb)); err != nil {
		t.Fatalf("heartbeat with the text \\u0000 (no NUL): %v", err)
	}
}

func TestStatusBatchWithNULRefused(t *testing.T) {
	raw := `{"schema":1,"epoch":"e\u0000","items":[]}`
	_, err := DecodeStatusBatch([]byte(raw))
	if err == nil || !strings.Contains(err.Error(), "status batch: a NUL character") {
		t.Fatalf("status batch with a NUL epoch: got %v, want a refusal naming the status batch", err)
	}
}
