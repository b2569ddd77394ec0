package runtime

import (
	"errors"
	"fmt"

	"github.com/podvisor/podvisor/pod/objects"
)

// FailedMount is the kubelet's event reason for a volume it could not set
// up. The container waits in ContainerCreating (no waiting reason of its
// own) and the mount is tried again after a backoff, or at once when the
// objects the volume is made from change.
const FailedMount = "FailedMount"

// MountError is a volume that could not be set up yet: an object it is
// made from is missing, or lacks a key its items name. Its message is the
// kubelet's FailedMount event: `MountVolume.SetUp failed for volume "cfg"
// : configmap "app" not found`.
type MountError struct {
	Volume string
	Err    error
}

func (e *MountError) Error() string {
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", e.Volume, e.Err)
}

func (e *MountError) Unwrap() error { return e.Err }

// ObjectsPending is a start that waits for hub objects the device was
// told of but has not received yet (objects.ErrPending): the container
// keeps its default waiting state, no event is recorded (the kubelet,
// reading the API server, would have found them), and it is tried again
// as soon as objects change. The getter bounds the wait: past it the
// objects are answered as not found, with the kubelet's errors.
const ObjectsPending = "ObjectsPending"

// ConfigError is how a runtime reports a container it could not configure:
// an object still pending waits quietly (ObjectsPending), a MountError
// waits as the kubelet's FailedMount, anything else is a
// CreateContainerConfigError.
func ConfigError(err error) *CreateError {
	if errors.Is(err, objects.ErrPending) {
		return &CreateError{Reason: ObjectsPending, Message: err.Error()}
	}
	if me := (*MountError)(nil); errors.As(err, &me) {
		return &CreateError{Reason: FailedMount, Message: me.Error()}
	}
	return &CreateError{Reason: "CreateContainerConfigError", Message: err.Error()}
}
