package supervisor

import (
	"errors"
	"testing"
)

// A request runs on whoever serves the inbox and returns what it
// returned; once the loop has stopped, requests fail at once.
func TestInboxServesThenFailsWhenStopped(t *testing.T) {
	b := newInbox()
	served := make(chan struct{})
	go func() {
		defer close(served)
		(<-b.requests).serve()
	}()
	want := errors.New("from the loop")
	if err := b.do(func() error { return want }); err != want {
		t.Fatalf("do: %v, want the request's own error", err)
	}
	<-served
	select {
	case <-b.supervising:
		t.Fatal("supervising before the start-up is over")
	default:
	}
	b.startSupervising()
	<-b.supervising
	b.stop()
	ran := false
	if err := b.do(func() error { ran = true; return nil }); !errors.Is(err, errStopped) || ran {
		t.Fatalf("do after stop: %v (ran %v), want errStopped without running", err, ran)
	}
}
