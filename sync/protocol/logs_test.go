package protocol

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

func logsKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func openReq(sent time.Time) LogsRequest {
	tail := int64(10)
	return LogsRequest{Device: "gw-1", ID: "0123456789abcdef0123456789abcdef", Op: LogsOpen, Sent: sent, Expires: sent.Add(time.Minute),
		Namespace: "default", Pod: "web", Options: &LogsOptions{Container: "app", TailLines: &tail}}
}

func TestLogsRequestSignedBoundAndTimed(t *testing.T) {
	pub, priv := logsKey(t)
	other, _ := logsKey(t)
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	msg, err := SignLogsRequest(openReq(t0), priv)
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenLogsRequest(msg, "gw-1", pub, t0.Add(time.Second))
	if err != nil || r.Pod != "web" || *r.Options.TailLines != 10 {
		t.Fatalf("open: %+v, %v", r, err)
	}
	for name, tc := range map[string]struct {
		device string
		key    ed25519.PublicKey
		now    time.Time
		want   string
	}{
		"other device":            {"gw-2", pub, t0, "is for device"},
		"other key":               {"gw-1", other, t0, "does not verify"},
		"no key":                  {"gw-1", nil, t0, "no key"},
		"expired":                 {"gw-1", pub, t0.Add(2*time.Minute + time.Second), "valid from"},
		"device clock far behind": {"gw-1", pub, t0.Add(-time.Minute - time.Second), "valid from"},
	} {
		if _, err := OpenLogsRequest(msg, tc.device, tc.key, tc.now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	// A device clock off by less than the validity is tolerated.
	for _, now := range []time.Time{t0.Add(-59 * time.Second), t0.Add(119 * time.Second)} {
		if _, err := OpenLogsRequest(msg, "gw-1", pub, now); err != nil {
			t.Errorf("at %s: %v", now, err)
		}
	}
	// Tampering breaks the signature.
	forged := strings.Replace(string(msg), "web", "wex", 1)
	if _, err := OpenLogsRequest([]byte(forged), "gw-1", pub, t0); err == nil {
		t.Error("a tampered request opened")
	}
	if _, err := OpenLogsRequest(make([]byte, MaxLogsRequestBytes+1), "gw-1", pub, t0); err == nil || !strings.Contains(err.Error(), "byte limit") {
		t.Errorf("oversized: %v", err)
	}
}

func TestLogsRequestValidation(t *testing.T) {
	_, priv := logsKey(t)
	t0 := time.Unix(1_800_000_000, 0)
	neg, zero := int64(-1), int64(0)
	for name, tc := range map[string]struct {
		edit func(*LogsRequest)
		want string
	}{
		"short id":        {func(r *LogsRequest) { r.ID = "abc" }, "id"},
		"upper id":        {func(r *LogsRequest) { r.ID = strings.ToUpper(r.ID) }, "lower-case"},
		"long ttl":        {func(r *LogsRequest) { r.Expires = r.Sent.Add(3 * time.Minute) }, "expires"},
		"no ttl":          {func(r *LogsRequest) { r.Expires = r.Sent }, "expires"},
		"bad op":          {func(r *LogsRequest) { r.Op = "exec" }, "op"},
		"bad pod":         {func(r *LogsRequest) { r.Pod = "../x" }, "pod"},
		"bad container":   {func(r *LogsRequest) { r.Options.Container = "A B" }, "container"},
		"negative tail":   {func(r *LogsRequest) { r.Options.TailLines = &neg }, "tailLines"},
		"both since":      {func(r *LogsRequest) { r.Options.SinceSeconds = &neg; r.Options.SinceTime = &t0 }, "at most one"},
		"zero since":      {func(r *LogsRequest) { r.Options.SinceSeconds = &zero }, "sinceSeconds"},
		"zero limit":      {func(r *LogsRequest) { r.Options.LimitBytes = &zero }, "limitBytes"},
		"no options":      {func(r *LogsRequest) { r.Options = nil }, "options"},
		"cancel with pod": {func(r *LogsRequest) { r.Op = LogsCancel }, "names no pod"},
	} {
		r := openReq(t0)
		tc.edit(&r)
		if _, err := SignLogsRequest(r, priv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func TestLogsFrames(t *testing.T) {
	id := "0123456789abcdef"
	msg, err := EncodeLogsFrame(LogsFrame{Request: id, Seq: 3}, []byte("hello\n"))
	if err != nil {
		t.Fatal(err)
	}
	f, data, err := DecodeLogsFrame(msg)
	if err != nil || f.Seq != 3 || string(data) != "hello\n" {
		t.Fatalf("%+v %q %v", f, data, err)
	}
	msg, _ = EncodeLogsFrame(LogsFrame{Request: id, End: true, Error: "pods \"x\" not found\x1b[2J", Reason: LogsNotFound}, nil)
	f, _, err = DecodeLogsFrame(msg)
	if err != nil || f.Reason != LogsNotFound || strings.ContainsRune(f.Error, 0x1b) {
		t.Fatalf("%+v %v", f, err)
	}
	if _, err := EncodeLogsFrame(LogsFrame{Request: id}, make([]byte, MaxLogsFrameData+1)); err == nil {
		t.Error("an oversized frame encoded")
	}
	for name, payload := range map[string]string{
		"no header":       "hello",
		"unknown field":   `{"schema":1,"request":"0123456789abcdef","seq":0,"x":1}` + "\n",
		"short request":   `{"schema":1,"request":"01","seq":0}` + "\n",
		"negative seq":    `{"schema":1,"request":"0123456789abcdef","seq":-1}` + "\n",
		"error with data": `{"schema":1,"request":"0123456789abcdef","seq":0,"end":true,"error":"e","reason":"NotFound"}` + "\nx",
		"error, no end":   `{"schema":1,"request":"0123456789abcdef","seq":0,"error":"e","reason":"NotFound"}` + "\n",
		"bad reason":      `{"schema":1,"request":"0123456789abcdef","seq":0,"end":true,"error":"e","reason":"Teapot"}` + "\n",
		"other schema":    `{"schema":2,"request":"0123456789abcdef","seq":0}` + "\n",
	} {
		if _, _, err := DecodeLogsFrame([]byte(payload)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if _, _, err := DecodeLogsFrame(make([]byte, MaxLogsFrameBytes+1)); err == nil {
		t.Error("an oversized frame decoded")
	}
}

// The logs decoders never panic; what they accept re-encodes.
func FuzzDecodeLogsFrame(f *testing.F) {
	ok, _ := EncodeLogsFrame(LogsFrame{Request: "0123456789abcdef", Seq: 2}, []byte("line\n"))
	refusal, _ := EncodeLogsFrame(LogsFrame{Request: "0123456789abcdef", End: true, Error: "pods \"x\" not found", Reason: LogsNotFound}, nil)
	f.Add(ok)
	f.Add(refusal)
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, text, err := DecodeLogsFrame(data)
		if err != nil {
			return
		}
		again, err := EncodeLogsFrame(*fr, text)
		if err != nil {
			t.Fatalf("an accepted frame does not encode: %v", err)
		}
		if _, _, err := DecodeLogsFrame(again); err != nil {
			t.Fatalf("a re-encoded frame does not decode: %v", err)
		}
	})
}

func FuzzOpenLogsRequest(f *testing.F) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	msg, _ := SignLogsRequest(openReq(t0), priv)
	f.Add(msg)
	f.Add([]byte(`{"schema":1,"doc":{"schema":1},"signature":"AAAA"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := OpenLogsRequest(data, "gw-1", pub, t0)
		if err != nil {
			return
		}
		if r.Device != "gw-1" || r.validate() != nil {
			t.Fatalf("accepted %+v", r)
		}
	})
}
