package uplink

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/lease"
)

func leasePod(seconds string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{lease.Annotation: seconds}}}
}

// A receipt renews the leases at its heartbeat's send time, and only
// once the connection's desired document is taken; a new connection
// waits for its own; receipts of unknown or older heartbeats move nothing.
func TestLeaseLinkRenewsAtAnsweredSendTimeAfterTheDocument(t *testing.T) {
	var l leaseLink
	l.init()
	t0 := time.Unix(5000, 0)
	l.connected()
	first := l.current()
	b1 := l.beat(t0)
	b2 := l.beat(t0.Add(time.Second))
	l.answer(b2)
	if _, ok := l.due(); ok {
		t.Fatal("renewed before the connection's document was taken")
	}
	l.docTaken(first)
	if at, ok := l.due(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("due %v %v, want the answered beat's send time", at, ok)
	}
	l.answer(b1) // a late answer to an older beat
	if _, ok := l.due(); ok {
		t.Fatal("an older send time renewed again")
	}
	l.answer(b2 + 1000) // never sent by this run
	if _, ok := l.due(); ok {
		t.Fatal("a receipt of a heartbeat this run never sent renewed")
	}

	l.connected() // the link came back
	b3 := l.beat(t0.Add(10 * time.Second))
	l.answer(b3)
	if _, ok := l.due(); ok {
		t.Fatal("renewed on a new connection before its document")
	}
	l.docTaken(first) // a document of the old connection, applied late
	if _, ok := l.due(); ok {
		t.Fatal("a document received before the reconnection let the leases renew")
	}
	l.docTaken(l.current())
	if at, ok := l.due(); !ok || !at.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("due %v %v after the new connection's document", at, ok)
	}
}

// Heartbeats come every fourth of the shortest lease (at least a second)
// while a pod has one, and the send times kept are bounded.
func TestLeaseLinkPeriodAndBound(t *testing.T) {
	var l leaseLink
	l.init()
	if got := l.period(30 * time.Second); got != 30*time.Second {
		t.Fatalf("period without lease pods %v", got)
	}
	if !l.setPods([]*v1.Pod{leasePod("60"), leasePod("20"), {}}) || l.setPods([]*v1.Pod{leasePod("20")}) {
		t.Fatal("setPods reports a change wrongly")
	}
	if got := l.period(30 * time.Second); got != 5*time.Second {
		t.Fatalf("period with a 20 s lease %v, want 5s", got)
	}
	l.setPods([]*v1.Pod{leasePod("5")})
	if got := l.period(30 * time.Second); got != 1250*time.Millisecond {
		t.Fatalf("period with a 5 s lease %v, want 1.25s", got)
	}
	for i := range 3 * maxBeatsKept {
		l.beat(time.Unix(int64(i), 0))
	}
	if len(l.sent) > maxBeatsKept {
		t.Fatalf("%d send times kept, bound %d", len(l.sent), maxBeatsKept)
	}
}
