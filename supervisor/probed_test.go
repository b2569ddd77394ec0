package supervisor

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podprobes"
)

// The daemon says which run changed a probe's verdict, a listen event's
// or the period's: what tells listen-driven readiness from the period
// without timing it.
func TestProbeVerdictSaysWhichRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := shellDaemon(t, ctx, newFakeRuntime())
	st := desireWebPod(t, d, `  - {name: app, image: host}`)
	var in *lifecycle.Instance
	runUntil(t, d, "the container runs", func() bool {
		in = d.machine.Instance(st.Pods[0].UID)
		return in != nil && in.Container("app") != nil && in.Container("app").Phase == lifecycle.Running
	})
	var log bytes.Buffer
	d.log = slog.New(slog.NewTextHandler(&log, nil))
	id := in.Container("app").InstanceID
	d.probed(podprobes.Report{Result: probes.Result{InstanceID: id, Kind: vocab.Readiness, OK: true, Listen: true}})
	d.probed(podprobes.Report{Result: probes.Result{InstanceID: id, Kind: vocab.Readiness, OK: false}})
	for _, want := range []string{
		`msg="probe verdict" pod=default/web container=app probe=Readiness ok=true run="listen event"`,
		`msg="probe verdict" pod=default/web container=app probe=Readiness ok=false run=period`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, log.String())
		}
	}
}
