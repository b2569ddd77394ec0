package supervisor

import "testing"

// Ready closes after the loop's first step, not when the start-up ends
// just before it: the step publishes the API's view, and the self-update's
// commit gate compares the containers the API shows at Ready with the
// handoff. Closed before (a step that waits on a write lets the gate's
// goroutine run first), the gate saw no container and rolled a good
// version back (found by test/e2e/selfupdate_test.go).
func TestReadyAfterTheFirstStep(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	d := runnable(t, shellConfig(t), newFakeRuntime())
	d.supervising() // no runtime to wait for: the start-up is over
	select {
	case <-d.Ready():
		t.Fatal("Ready before a step published the view")
	default:
	}
	d.service.stepped()
	select {
	case <-d.Ready():
	default:
		t.Fatal("Ready still open after the step")
	}
}
