package lifecycle

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/vocab"
)

// The pod vocabulary the core speaks lives in package pod, below every
// folder that uses it; these are the core's names for it. (It is imported
// as vocab: the core's tests have a helper named pod.)

// Termination describes one finished container instance.
type Termination = vocab.Termination

// ProbeKind names a probe.
type ProbeKind = vocab.ProbeKind

// Probes.
const (
	Startup   = vocab.Startup
	Liveness  = vocab.Liveness
	Readiness = vocab.Readiness
)

// ContainerIDPrefix is the runtime scheme in containerID fields.
const ContainerIDPrefix = vocab.ContainerIDPrefix

// InstanceID names a container instance (vocab.InstanceID).
func InstanceID(uid types.UID, container string, attempt int) string {
	return vocab.InstanceID(uid, container, attempt)
}

// QOSClass is the pod's QoS class (vocab.QOSClass).
func QOSClass(p *v1.Pod) v1.PodQOSClass { return vocab.QOSClass(p) }

// IsSidecar reports whether an init container spec is a sidecar.
func IsSidecar(c *v1.Container) bool { return vocab.IsSidecar(c) }

// PriorityOf is a pod's resolved priority (0 when unset).
func PriorityOf(p *v1.Pod) int32 { return vocab.Priority(p) }
