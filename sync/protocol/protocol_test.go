package protocol

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/pod/manifest"
)

func keys(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

const webPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"runtimeClassName":"process","containers":[{"name":"app","image":"host","command":["sleep","1"]}]}}`

func desired(gen int64, pods ...string) Desired {
	d := Desired{Device: "gw-1", Generation: gen}
	for _, p := range pods {
		d.Pods = append(d.Pods, json.RawMessage(p))
	}
	return d
}

func TestSignedDocumentOpens(t *testing.T) {
	pub, priv := keys(t)
	data, err := Sign(desired(3, webPod), priv)
	if err != nil {
		t.Fatal(err)
	}
	d, err := OpenDesired(data, "gw-1", pub, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation != 3 || len(d.Pods) != 1 {
		t.Fatalf("opened %+v", d)
	}
	pods, results := DecodePods(d, manifest.Decode)
	if len(pods) != 1 || !results[0].Accepted || results[0].Name != "web" || results[0].Namespace != "default" {
		t.Fatalf("pods %v results %+v", pods, results)
	}
	if pods[0].Spec.RestartPolicy != "Always" {
		t.Fatalf("defaults not applied: %+v", pods[0].Spec)
	}
}

func TestDesiredRefusals(t *testing.T) {
	pub, priv := keys(t)
	_, otherPriv, _ := ed25519.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{9}, 64)))
	signed, _ := Sign(desired(3, webPod), priv)
	unsigned, _ := Sign(desired(3, webPod), nil)
	byOther, _ := Sign(desired(3, webPod), otherPriv)
	tampered := bytes.Replace(signed, []byte(`"generation":3`), []byte(`"generation":4`), 1)
	gen0, _ := Sign(desired(0), priv)
	otherDevice, _ := Sign(Desired{Device: "gw-2", Generation: 1}, priv)
	env := func(inner string) []byte {
		raw := json.RawMessage(inner)
		b, _ := json.Marshal(Signed{Schema: 1, Desired: raw, Signature: ed25519.Sign(priv, raw)})
		return b
	}
	for _, c := range []struct {
		name          string
		data          []byte
		allowUnsigned bool
		want          string
	}{
		{"unsigned", unsigned, false, "not signed"},
		{"other key", byOther, false, "does not verify with the hub's key " + KeyID(pub)},
		{"tampered", tampered, false, "does not verify"},
		{"generation 0", gen0, false, "generation 0"},
		{"other device", otherDevice, false, `for device "gw-2", this is "gw-1"`},
		{"malformed", []byte(`{"schema":1,"desired":`), false, "desired document"},
		{"not an object", []byte(`[1,2]`), false, "cannot unmarshal array"},
		{"unknown envelope field", []byte(`{"schema":1,"desired":{},"extra":1}`), true, `unknown field "extra"`},
		{"unknown desired field", env(`{"schema":1,"device":"gw-1","generation":1,"pods":[],"podz":[]}`), false, `unknown field "podz"`},
		{"wrong type", env(`{"schema":1,"device":"gw-1","generation":"1","pods":[]}`), false, "generation"},
		{"newer schema", env(`{"schema":2,"device":"gw-1","generation":1,"pods":[]}`), false, "schema 2"},
		{"envelope schema", []byte(`{"schema":7,"desired":{}}`), true, "schema 7"},
		{"no desired", []byte(`{"schema":1}`), true, "no desired field"},
		{"oversize", append([]byte(`{"schema":1,"desired":"`), bytes.Repeat([]byte("x"), MaxDesiredBytes)...), true, "over the"},
		{"no key to check", signed, false, ""}, // hub key nil below
	} {
		t.Run(c.name, func(t *testing.T) {
			key := pub
			if c.name == "no key to check" {
				key, c.want = nil, "no hub key"
			}
			_, err := OpenDesired(c.data, "gw-1", key, c.allowUnsigned)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	// Unsigned documents pass where the device allows them.
	if _, err := OpenDesired(unsigned, "gw-1", pub, true); err != nil {
		t.Fatalf("allowUnsigned: %v", err)
	}
}

func TestDecodePodsJudgesEachPod(t *testing.T) {
	bad := strings.Replace(webPod, `"name":"app"`, `"name":"App_1"`, 1)
	renamed := strings.Replace(webPod, `"name":"web"`, `"name":"db"`, 1)
	unknown := strings.Replace(webPod, `"spec":{`, `"spec":{"nodeSelectr":{},`, 1)
	d := desired(1, webPod, bad, webPod, renamed, unknown, `"a string"`)
	pods, results := DecodePods(&d, manifest.Decode)
	if len(pods) != 2 || pods[0].Name != "web" || pods[1].Name != "db" {
		t.Fatalf("accepted %d pods", len(pods))
	}
	want := []struct {
		accepted bool
		reason   string
	}{
		{true, ""},
		{false, "pods[1]: pod \"web\": spec.containers[0].name"},
		{false, "pods[2]: pod default/web appears twice"},
		{true, ""},
		{false, `pods[4]: pod "web": unknown field "spec.nodeSelectr"`},
		{false, "pods[5]"},
	}
	for i, w := range want {
		r := results[i]
		if r.Index != i || r.Accepted != w.accepted || !strings.Contains(r.Reason, w.reason) {
			t.Errorf("result %d: %+v, want accepted=%v reason containing %q", i, r, w.accepted, w.reason)
		}
	}
	if results[1].Name != "web" {
		t.Errorf("an invalid pod's result names it: %+v", results[1])
	}
}

func TestTopics(t *testing.T) {
	tp := Topics{Prefix: "fleet/a/"}
	if got := tp.Device("gw-1", KindDesired); got != "fleet/a/devices/gw-1/desired" {
		t.Fatalf("topic %s", got)
	}
	if got := tp.All(KindStatus); got != "fleet/a/devices/+/status" {
		t.Fatalf("filter %s", got)
	}
	dev, kind, err := tp.Parse("fleet/a/devices/gw-1/status")
	if err != nil || dev != "gw-1" || kind != KindStatus {
		t.Fatalf("parse: %s %s %v", dev, kind, err)
	}
	for _, bad := range []string{"fleet/b/devices/gw-1/status", "fleet/a/devices/gw-1", "fleet/a/devices/GW/status", "fleet/a/devices/gw-1/status/x"} {
		if _, _, err := tp.Parse(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
	if (Topics{}).Device("d", KindAck) != "podvisor/v1/devices/d/ack" {
		t.Fatal("default prefix")
	}
}

func TestValidDeviceID(t *testing.T) {
	for _, ok := range []string{"gw-1", "a", "kiosk.lobby_2", strings.Repeat("a", 63)} {
		if err := ValidDeviceID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "a/b", "a+b", "a#", "Gw", strings.Repeat("a", 64), "a b"} {
		if err := ValidDeviceID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestStatusBatchChecks(t *testing.T) {
	good := Encode(&StatusBatch{Device: "gw-1", Epoch: "e1", Items: []StatusItem{{Seq: 1, Key: "default/web"}, {Seq: 2, Key: "default/db", Event: &Event{Reason: "Killing"}}}})
	b, err := DecodeStatusBatch(good)
	if err != nil || len(b.Items) != 2 || b.Items[1].Event.Reason != "Killing" {
		t.Fatalf("%+v %v", b, err)
	}
	for _, c := range []struct{ data, want string }{
		{`{"schema":1,"device":"gw-1","epoch":"e","items":[{"seq":1,"key":"a"},{"seq":1,"key":"b"}]}`, "items[1].seq 1, want 2"},
		{`{"schema":1,"device":"gw-1","epoch":"e","after":7,"items":[{"seq":1000000000000,"key":"a"}]}`, "items[0].seq 1000000000000, want 8"},
		{`{"schema":1,"device":"gw-1","epoch":"e","items":[{"seq":1,"key":"a"},{"seq":3,"key":"b"}]}`, "no gap"},
		{`{"schema":1,"device":"gw-1","items":[]}`, "no epoch"},
		{`{"schema":1,"device":"gw-1","epoch":"e","items":[{"seq":1,"key":""}]}`, "key is empty"},
		{`{"schema":1,"device":"gw-1","epoch":"e","items":[{"seq":1,"key":"a","pod":{},"event":{}}]}`, "both"},
		{`{"schema":1,"device":"gw-1","epoch":"e","items":[{"seq":1,"key":"a","pod":{"spec":{"containers":5}}}]}`, "containers"},
		{`{"schema":1,"device":"gw-1","epoch":"e","items":[],"extra":true}`, `unknown field "extra"`},
		{`{"schema":1,"schema":1,"device":"gw-1","epoch":"e","items":[]}`, `duplicate field "schema"`},
	} {
		if _, err := DecodeStatusBatch([]byte(c.data)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.data, err, c.want)
		}
	}
	items := make([]StatusItem, MaxBatch+1)
	for i := range items {
		items[i] = StatusItem{Seq: int64(i + 1), Key: "k"}
	}
	if _, err := DecodeStatusBatch(Encode(&StatusBatch{Epoch: "e", Items: items})); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("oversized batch: %v", err)
	}
}

func TestAcksRoundTrip(t *testing.T) {
	a, err := DecodeAck(Encode(&Ack{Device: "gw-1", Generation: 4, ObservedGeneration: 4, Pods: []PodResult{{Index: 0, Name: "web", Accepted: true}}}))
	if err != nil || a.ObservedGeneration != 4 || !a.Pods[0].Accepted {
		t.Fatalf("%+v %v", a, err)
	}
	s, err := DecodeStatusAck(Encode(&StatusAck{Epoch: "e", Seq: 9}))
	if err != nil || s.Seq != 9 {
		t.Fatalf("%+v %v", s, err)
	}
	if _, err := DecodePresence([]byte(`{"schema":1,"device":"gw-1","online":"yes"}`)); err == nil {
		t.Fatal("presence with a string for online accepted")
	}
}

// The decoders never panic and never accept what they cannot re-encode.
func FuzzOpenDesired(f *testing.F) {
	pub, priv := keys(f)
	signed, _ := Sign(desired(2, webPod), priv)
	unsigned, _ := Sign(desired(2, webPod), nil)
	f.Add(signed)
	f.Add(unsigned)
	f.Add([]byte(`{"schema":1,"desired":{"schema":1,"device":"gw-1","generation":1,"pods":[{}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := OpenDesired(data, "gw-1", pub, true)
		if err != nil {
			return
		}
		if d.Device != "gw-1" || d.Generation < 1 {
			t.Fatalf("accepted %+v", d)
		}
		pods, results := DecodePods(d, manifest.Decode)
		if len(results) != len(d.Pods) || len(pods) > len(results) {
			t.Fatalf("%d pods, %d results for %d raw pods", len(pods), len(results), len(d.Pods))
		}
	})
}

func FuzzDecodeStatusBatch(f *testing.F) {
	f.Add(Encode(&StatusBatch{Device: "gw-1", Epoch: "e", Items: []StatusItem{{Seq: 1, Key: "default/web"}}}))
	f.Add([]byte(`{"schema":1,"epoch":"e","items":[{"seq":1,"key":"a","pod":{"metadata":{"name":"x"}}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeStatusBatch(data)
		if err != nil {
			return
		}
		again, err := DecodeStatusBatch(Encode(b))
		if err != nil || len(again.Items) != len(b.Items) {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
	})
}

func FuzzDecodeAck(f *testing.F) {
	f.Add(Encode(&Ack{Device: "gw-1", Generation: 1, ObservedGeneration: 1}))
	f.Add(Encode(&StatusAck{Epoch: "e", Seq: 3}))
	f.Fuzz(func(t *testing.T, data []byte) {
		DecodeAck(data)
		DecodeStatusAck(data)
		DecodeHeartbeat(data)
		DecodePresence(data)
	})
}

func TestKeysRoundTrip(t *testing.T) {
	pub, priv := keys(t)
	gotPub, err := ParsePublicKey(EncodePublicKey(pub))
	if err != nil || !gotPub.Equal(pub) {
		t.Fatalf("public key: %v", err)
	}
	gotPriv, err := ParsePrivateKey(EncodePrivateKey(priv))
	if err != nil || !gotPriv.Equal(priv) {
		t.Fatalf("private key: %v", err)
	}
	if _, err := ParsePublicKey(EncodePrivateKey(priv)); err == nil || !strings.Contains(err.Error(), "PUBLIC KEY") {
		t.Fatalf("a private key read as public: %v", err)
	}
	if _, err := ParsePrivateKey([]byte("junk")); err == nil {
		t.Fatal("junk read as a private key")
	}
}

func TestHeartbeatMetricsSnapshotBounded(t *testing.T) {
	good := &Heartbeat{Device: "d1", Metrics: &MetricsSnapshot{RunningPods: 3, RunningContainers: 4, PodsCPUSeconds: 1.5,
		Pressure: &PressureSnapshot{CPU: 2, Memory: 0.5}}}
	h, err := DecodeHeartbeat(Encode(good))
	if err != nil || h.Metrics == nil || h.Metrics.RunningPods != 3 || h.Metrics.Pressure.CPU != 2 {
		t.Fatalf("decoding a heartbeat with a snapshot: %+v, %v; want it kept", h, err)
	}
	for name, m := range map[string]MetricsSnapshot{
		"runningPods":   {RunningPods: -1},
		"outboxDepth":   {OutboxDepth: -5},
		"pressure.io":   {Pressure: &PressureSnapshot{IO: 101}},
		"podsCPU":       {PodsCPUSeconds: -1},
		"runningContai": {RunningContainers: 1 << 21},
	} {
		bad := &Heartbeat{Device: "d1", Metrics: &m}
		if _, err := DecodeHeartbeat(Encode(bad)); err == nil {
			t.Errorf("%s: a snapshot out of range was accepted", name)
		}
	}
}
