package supervisor

import (
	"context"
	"testing"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// pullWarner is a runtime whose every start fails to pull, with the
// kubelet's warning about pull secrets it could not read.
type pullWarner struct{ *fakeRuntime }

func (p pullWarner) Start(c *runtime.Container, done func(runtime.Started)) {
	done(runtime.Started{
		Err: &runtime.CreateError{Reason: "ErrImagePull", Message: "failed to pull and unpack image: 401 Unauthorized"},
		Events: []runtime.Event{{Type: "Warning", Reason: "FailedToRetrieveImagePullSecret",
			Message: "Unable to retrieve some image pull secrets (regcred); attempting to pull the image may not succeed."}},
	})
}

// The events a start reports are the pod's, recorded before those of the
// start's outcome, as the kubelet warns before it pulls.
func TestStartEventsRecorded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := shellDaemon(t, ctx, pullWarner{newFakeRuntime()})
	desireWebPod(t, d, `  - {name: app, image: host}`)
	var reasons []string
	runUntil(t, d, "the pull secret warning and the failed pull are recorded", func() bool {
		reasons = reasons[:0]
		for _, e := range d.view.Events("default", "web") {
			reasons = append(reasons, e.Reason)
		}
		return len(reasons) >= 2
	})
	if reasons[0] != "FailedToRetrieveImagePullSecret" || reasons[1] != "Failed" {
		t.Fatalf("events %v, want FailedToRetrieveImagePullSecret before Failed", reasons)
	}
}
