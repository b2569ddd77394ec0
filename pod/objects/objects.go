// Package objects is what device and hub share about the API objects a pod
// may take its configuration from: ConfigMaps and Secrets. It names them,
// finds which ones a pod references (as the API server's Node authorizer
// does to decide what a kubelet may read), and validates them as the API
// server validates them.
package objects

import (
	"errors"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Kind is an object's kind.
type Kind string

// The kinds a pod may reference.
const (
	ConfigMap Kind = "ConfigMap"
	Secret    Kind = "Secret"
)

// Ref names an object in a namespace.
type Ref struct {
	Kind      Kind   `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (r Ref) String() string { return string(r.Kind) + " " + r.Namespace + "/" + r.Name }

// Object is a ConfigMap or a Secret as a device uses it: its data, with a
// ConfigMap's binaryData merged in (keys never collide: validation
// refuses it), and what says which version it is.
type Object struct {
	Ref
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	Immutable       bool   `json:"immutable,omitempty"`
	// Type is a Secret's type.
	Type v1.SecretType     `json:"type,omitempty"`
	Data map[string][]byte `json:"data"`
}

// Size is the bytes of an object's data, keys and values (the API
// server's 1 MiB limit, MaxSize, counts the values only).
func (o *Object) Size() int {
	n := 0
	for k, v := range o.Data {
		n += len(k) + len(v)
	}
	return n
}

// Keys are the object's keys, sorted.
func (o *Object) Keys() []string {
	keys := make([]string, 0, len(o.Data))
	for k := range o.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ErrNotFound is the error a Getter returns for an object it does not
// have; errors.Is finds it in a NotFoundError.
var ErrNotFound = errors.New("not found")

// NotFoundError is an object a Getter does not have. Its message is the
// API server's, which the kubelet passes on: `configmap "app" not found`.
type NotFoundError struct{ Ref Ref }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s %q not found", lowerKind(e.Ref.Kind), e.Ref.Name)
}

// Is makes errors.Is(err, ErrNotFound) hold.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

func lowerKind(k Kind) string {
	switch k {
	case ConfigMap:
		return "configmap"
	case Secret:
		return "secret"
	}
	return string(k)
}

// ErrPending is the error a Getter returns for an object it knows exists
// but does not hold yet; errors.Is finds it in a PendingError.
var ErrPending = errors.New("pending")

// PendingError is an object the hub listed for this device (it exists, so
// the kubelet, reading the API server, would find it) whose data has not
// arrived yet, or whose newer version is on its way. A container start
// that meets it waits, quietly, and is tried again when objects change;
// a getter stops saying pending after a bound of its own (the hub may
// never answer), and then answers as without it. Local objects are never
// pending.
type PendingError struct {
	Ref Ref
	// Since is when the getter began waiting for it.
	Since time.Time
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("%s %q not yet received from the hub", lowerKind(e.Ref.Kind), e.Ref.Name)
}

// Is makes errors.Is(err, ErrPending) hold (and never ErrNotFound).
func (e *PendingError) Is(target error) bool { return target == ErrPending }

// Getter gives the objects one pod may see: a hub pod the hub's objects
// for its device, a static pod the objects given in its manifest
// directory. It returns a *NotFoundError for an object it does not have,
// and a *PendingError for one it knows exists but has not received yet
// (hub objects only). The objects it returns are shared: callers must
// not modify them.
type Getter interface {
	Get(ref Ref) (*Object, error)
}
