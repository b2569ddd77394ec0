package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

func TestBrokerACLDevicePublish(t *testing.T) {
	acl := ACL{}
	dev := func(id, kind string) string { return protocol.Topics{}.Device(id, kind) }
	for _, c := range []struct {
		topic  string
		retain bool
		size   int
		want   string // "" allowed, else part of the error
	}{
		{dev("gw-1", protocol.KindStatus), false, 1000, ""},
		{dev("gw-1", protocol.KindHeartbeat), false, 1000, ""},
		{dev("gw-1", protocol.KindAck), true, 1000, ""},
		{dev("gw-1", protocol.KindPresence), true, 100, ""},
		{dev("gw-1", protocol.KindUpdateState), true, 500, ""},
		{dev("gw-1", protocol.KindUpdateState), false, 500, ""},
		{dev("gw-1", protocol.KindUpdateState), true, MaxRetainedUpdateStateBytes + 1, "byte limit"},
		{dev("gw-1", protocol.KindFetch), false, 200, ""},
		{dev("gw-1", protocol.KindFetch), true, 200, "may not retain"},
		{dev("gw-1", protocol.KindFetch), false, MaxFetchBytes + 1, "byte limit"},
		{dev("gw-1", protocol.KindObjectGet), false, 300, ""},
		{dev("gw-1", protocol.KindObjectGet), false, MaxObjectGetBytes + 1, "byte limit"},
		{dev("gw-1", protocol.KindObjectGet), true, 300, "may not retain"},
		{dev("gw-1", protocol.KindSealKey), true, 1700, ""},
		{dev("gw-1", protocol.KindSealKey), true, MaxRetainedSealKeyBytes + 1, "byte limit"},
		{dev("gw-1", protocol.KindLogs), false, MaxLogsFrameBytes, ""},
		{dev("gw-1", protocol.KindLogs), false, MaxLogsFrameBytes + 1, "byte limit"},
		{dev("gw-1", protocol.KindLogs), true, 300, "may not retain"},
		{dev("gw-2", protocol.KindLogs), false, 300, "may not publish"},
		{dev("gw-1", protocol.KindLogsRequest), false, 300, "may not publish"},
		{dev("gw-2", protocol.KindObjectGet), false, 300, "may not publish"},
		{dev("gw-2", protocol.KindSealKey), true, 1700, "may not publish"},
		{dev("gw-1", protocol.KindObjects), true, 10, "may not publish"},
		{dev("gw-1", protocol.KindObject), false, 10, "may not publish"},
		{dev("gw-1", protocol.KindUpdate), true, 10, "may not publish"},
		{dev("gw-1", protocol.KindChunk), false, 10, "may not publish"},
		{dev("gw-2", protocol.KindUpdateState), true, 10, "may not publish"},
		{dev("gw-2", protocol.KindFetch), false, 10, "may not publish"},
		{dev("gw-1", protocol.KindStatus), true, 10, "may not retain"},
		{dev("gw-1", protocol.KindHeartbeat), true, 10, "may not retain"},
		{dev("gw-1", protocol.KindAck), true, MaxRetainedAckBytes + 1, "byte limit"},
		{dev("gw-1", protocol.KindPresence), true, MaxRetainedPresenceBytes + 1, "byte limit"},
		{dev("gw-1", protocol.KindStatus), false, protocol.MaxMessageBytes + 1, "byte limit"},
		{dev("gw-1", protocol.KindDesired), true, 10, "may not publish"},
		{dev("gw-1", protocol.KindStatusAck), false, 10, "may not publish"},
		{dev("gw-1", "junk"), false, 10, "may not publish"},
		{dev("gw-1", "status/more"), false, 10, "may not publish"},
		{dev("gw-2", protocol.KindStatus), false, 10, "may not publish"},
		{dev("gw-2", protocol.KindAck), true, 10, "may not publish"},
		{dev("gw-2", protocol.KindHeartbeat), false, 10, "may not publish"},
		{dev("gw-2", protocol.KindPresence), true, 10, "may not publish"},
		{dev("gw-2", protocol.KindDesired), true, 10, "may not publish"},
		{dev("gw-1x", protocol.KindStatus), false, 10, "may not publish"},
		{protocol.Topics{}.HubPresence(), true, 10, "may not publish"},
		{"other/tree", false, 10, "may not publish"},
		{"$SYS/broker", false, 10, "may not publish"},
	} {
		err := acl.CheckPublish("gw-1", c.topic, c.retain, c.size)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("gw-1 publishing %s (retain %v, %d bytes): %v, want %q", c.topic, c.retain, c.size, err, c.want)
		}
	}
}

func TestBrokerACLDeviceRead(t *testing.T) {
	acl := ACL{}
	dev := func(id, kind string) string { return protocol.Topics{}.Device(id, kind) }
	for topic, allowed := range map[string]bool{
		dev("gw-1", protocol.KindDesired):     true,
		dev("gw-1", protocol.KindStatusAck):   true,
		protocol.Topics{}.HubPresence():       true,
		dev("gw-1", protocol.KindUpdate):      true,
		dev("gw-1", protocol.KindChunk):       true,
		dev("gw-1", protocol.KindObjects):     true,
		dev("gw-1", protocol.KindObject):      true,
		dev("gw-2", protocol.KindObjects):     false,
		dev("gw-1", protocol.KindLogsRequest): true,
		dev("gw-2", protocol.KindLogsRequest): false,
		dev("+", protocol.KindLogsRequest):    false,
		dev("gw-1", protocol.KindLogs):        false,
		dev("gw-2", protocol.KindObject):      false,
		dev("+", protocol.KindObject):         false,
		dev("gw-1", protocol.KindObjectGet):   false,
		dev("gw-1", protocol.KindSealKey):     false,
		dev("gw-2", protocol.KindUpdate):      false,
		dev("gw-2", protocol.KindChunk):       false,
		dev("gw-1", protocol.KindFetch):       false,
		dev("gw-1", protocol.KindUpdateState): false,
		dev("+", protocol.KindChunk):          false,
		dev("gw-2", protocol.KindDesired):     false,
		dev("gw-2", protocol.KindStatusAck):   false,
		dev("gw-1", protocol.KindStatus):      false,
		dev("gw-1", protocol.KindAck):         false,
		dev("+", protocol.KindDesired):        false,
		"podvisor/v1/devices/gw-1/#":          false,
		"podvisor/v1/#":                       false,
		"#":                                   false,
		"$SYS/#":                              false,
	} {
		if err := acl.CheckRead("gw-1", topic); (err == nil) != allowed {
			t.Errorf("gw-1 reading %s: %v, want allowed=%v", topic, err, allowed)
		}
	}
}

func TestBrokerACLHub(t *testing.T) {
	acl := ACL{Topics: protocol.Topics{Prefix: "fleet/v1"}}
	for _, topic := range []string{"fleet/v1/devices/gw-1/desired", "fleet/v1/devices/+/status", "fleet/v1/#", "fleet/v1/hub/presence"} {
		if err := acl.CheckPublish("podhub", topic, true, protocol.MaxDesiredBytes); err != nil {
			t.Errorf("the hub publishing %s: %v", topic, err)
		}
		if err := acl.CheckRead("podhub", topic); err != nil {
			t.Errorf("the hub reading %s: %v", topic, err)
		}
	}
	for _, topic := range []string{"podvisor/v1/devices/gw-1/desired", "#", "$SYS/#", "fleet/v10/x"} {
		if acl.CheckPublish("podhub", topic, false, 1) == nil || acl.CheckRead("podhub", topic) == nil {
			t.Errorf("the hub allowed outside its prefix: %s", topic)
		}
	}
}

func TestBrokerACLIdentity(t *testing.T) {
	acl := ACL{}
	for _, c := range []struct{ cn, clientID, want string }{
		{"gw-1", "gw-1", ""},
		{"podhub", "podhub", ""},
		{"podhub", "podhub:hub-1.example", ""},
		{"podhub", "podhub:", "a replica of the hub"},
		{"podhub", "podhub:Bad_ID", "a replica of the hub"},
		{"podhub", "podhub-x", "must equal"},
		{"gw-1", "podhub:gw-1", "must equal"},
		{"gw-1", "gw-2", `client ID "gw-2": must equal`},
		{"gw-1", "podhub", "must equal"},
		{"gw-1", "podvisor-gw-1", "must equal"},
		{"gw-1", "", "must equal"},
		{"inline", "inline", "reserved"},
		{"Bad_CN", "Bad_CN", "certificate common name"},
		{"", "", "certificate common name"},
		{"gw/1", "gw/1", "certificate common name"},
	} {
		err := acl.CheckIdentity(c.cn, c.clientID)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CN %q client ID %q: %v, want %q", c.cn, c.clientID, err, c.want)
		}
	}
}

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBucket(10, 20, t0)
	for i := range 20 {
		if !b.allow(t0, 1) {
			t.Fatalf("burst: message %d refused", i)
		}
	}
	if b.allow(t0, 1) {
		t.Fatal("the 21st message of a burst of 20 was allowed")
	}
	if !b.allow(t0.Add(100*time.Millisecond), 1) || b.allow(t0.Add(100*time.Millisecond), 1) {
		t.Fatal("after 100 ms at 10/s, want exactly one more")
	}
	// A clock stepping back adds nothing; a long pause refills to the
	// burst only.
	if b.allow(t0.Add(-time.Hour), 1) {
		t.Fatal("a clock step back refilled the bucket")
	}
	later := t0.Add(time.Hour)
	n := 0
	for b.allow(later, 1) {
		n++
	}
	if n != 20 {
		t.Fatalf("after an hour: %d allowed, want the burst of 20", n)
	}
	if !newBucket(0, 0, t0).allow(t0, 1e9) {
		t.Fatal("a zero rate is unlimited")
	}
}

func TestNewBrokerRefusesInsecureSetups(t *testing.T) {
	if _, err := New(Config{Address: "0.0.0.0:0", Open: true}); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("an open broker on every interface: %v", err)
	}
	if _, err := New(Config{Address: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("a broker without TLS that is not open: %v", err)
	}
	if _, err := New(Config{Address: "0.0.0.0:0"}); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("a broker off loopback without TLS: %v", err)
	}
}
