package pluginapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// A pull's logins cross to the plugin in the request's JSON, and print
// nowhere else: not formatted, not logged.
func TestCredentialsOnlyOnTheWire(t *testing.T) {
	args := RunArgs{Config: ContainerConfig{ID: "c"}, Pull: PullAuth{Credentials: []Credential{{Username: "fleet", Password: "hunter2"}}}}
	wire, err := json.Marshal(args)
	if err != nil || !bytes.Contains(wire, []byte(`"password":"hunter2"`)) {
		t.Fatalf("the request does not carry the login: %s %v", wire, err)
	}
	var back RunArgs
	if err := json.Unmarshal(wire, &back); err != nil || back.Pull.Credentials[0].Password != "hunter2" {
		t.Fatalf("the login does not survive the trip: %v", err)
	}
	var log bytes.Buffer
	slog.New(slog.NewJSONHandler(&log, nil)).Info("run", "args", args, "pull", args.Pull, "cred", args.Pull.Credentials[0])
	slog.New(slog.NewTextHandler(&log, nil)).Info("run", "args", args, "pull", args.Pull, "cred", args.Pull.Credentials[0])
	for _, s := range []string{fmt.Sprint(args), fmt.Sprintf("%+v %#v", args, args), log.String()} {
		if strings.Contains(s, "hunter2") || strings.Contains(s, "fleet") {
			t.Fatalf("a login printed: %s", s)
		}
	}
	if empty, _ := json.Marshal(RunArgs{}); bytes.Contains(empty, []byte(`"pull":`)) {
		t.Fatalf("a request without logins names them: %s", empty)
	}
}
