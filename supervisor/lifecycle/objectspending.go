package lifecycle

import "time"

// objectsPending is a start that waits for objects the hub listed for the
// device and has not sent yet: the kubelet, reading the API server, would
// have them, so nothing is said: the container keeps its default waiting
// state, no event, no failure counted. It is tried again when objects
// change (RetryWaiting), when the getter gives up waiting (it then
// answers not found, and the kubelet's errors follow), or at
// objectsPendingRecheck, whichever comes first.
func (m *Machine) objectsPending(in *Instance, c *Container, message string, now time.Time, retryNow bool) []Action {
	c.Phase, c.WaitReason, c.WaitMessage, c.WaitSince = Waiting, ObjectsPending, message, now
	c.NotBefore = now.Add(objectsPendingRecheck)
	if retryNow {
		c.NotBefore = now
	}
	m.wakeAt(c.NotBefore)
	m.touch(in.UID())
	return nil
}

// objectsPendingRecheck is how often a container waiting for pending
// objects is tried again with no change told: a safety net only.
const objectsPendingRecheck = 10 * time.Second
