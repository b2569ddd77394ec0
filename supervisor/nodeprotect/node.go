package nodeprotect

import (
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/supervisor/admission"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	podruntime "github.com/podvisor/podvisor/supervisor/runtime"
)

// NodeConfig is how much of the device pods may use.
type NodeConfig struct {
	MaxPods int64
	// SystemReserved and PodvisorReserved are kept from pods, as the
	// kubelet's systemReserved and kubeReserved.
	SystemReserved   v1.ResourceList
	PodvisorReserved v1.ResourceList
	// Eviction thresholds (kubelet format); hard ones also come off
	// allocatable.
	EvictionHard map[string]string
	// Version is reported as the node's kubelet version.
	Version string
}

// capacity reads what the device has.
func (p *Protector) capacity() v1.ResourceList {
	c := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(p.memory, resource.BinarySI),
		v1.ResourcePods:   *resource.NewQuantity(p.node.MaxPods, resource.DecimalSI),
	}
	var st unix.Statfs_t
	if unix.Statfs(p.dataDir, &st) == nil {
		c[v1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(st.Blocks)*int64(st.Bsize), resource.BinarySI)
	}
	return c
}

// Allocatable is what pods may use of the device's capacity: the downward
// API's limits for a container that sets none.
func (p *Protector) Allocatable() v1.ResourceList { return p.allocatable(p.capacity()) }

// ReadAllocatable reads Allocatable once, for PodEnv: once the data
// directory, whose file system is the pods' ephemeral storage, exists.
func (p *Protector) ReadAllocatable() { p.podAllocatable = p.Allocatable() }

// PodEnv is what the downward API tells containers of the node: its name,
// its host IP, and the allocatable resources ReadAllocatable read, for
// limits a container leaves unset.
func (p *Protector) PodEnv() podruntime.PodEnv {
	return podruntime.PodEnv{NodeName: p.nodeName, HostIP: p.hostIP, Allocatable: p.podAllocatable}
}

// allocatable is capacity less the reservations and the hard eviction
// thresholds, as the kubelet computes it.
func (p *Protector) allocatable(capacity v1.ResourceList) v1.ResourceList {
	a := capacity.DeepCopy()
	for _, reserved := range []v1.ResourceList{p.node.SystemReserved, p.node.PodvisorReserved} {
		for name, q := range reserved {
			if v, ok := a[name]; ok {
				v.Sub(q)
				a[name] = v
			}
		}
	}
	if ts, err := eviction.Parse(p.node.EvictionHard, nil, nil, nil); err == nil {
		for _, t := range ts {
			name := map[eviction.Signal]v1.ResourceName{eviction.MemoryAvailable: v1.ResourceMemory,
				eviction.NodeFsAvailable: v1.ResourceEphemeralStorage}[t.Signal]
			v, ok := a[name]
			if name == "" || !ok {
				continue
			}
			amount := t.Quantity
			if t.Percentage > 0 {
				c := capacity[name]
				amount = int64(t.Percentage * float64(c.Value()))
			}
			v.Sub(*resource.NewQuantity(amount, resource.BinarySI))
			a[name] = v
		}
	}
	for name, v := range a {
		if v.Sign() < 0 {
			a[name] = resource.Quantity{}
		}
	}
	return a
}

// Admitter is the core's admission decision: requests against
// allocatable, preemption by priority, and the pressure rules; nothing
// while the node drains.
func (p *Protector) Admitter() lifecycle.AdmitFunc {
	alloc := p.allocatable(p.capacity())
	return func(candidate *v1.Pod, held []*v1.Pod) lifecycle.Admission {
		if p.draining != nil {
			return lifecycle.Admission{Reason: "NodeShutdown", Message: "The node is draining (" + p.draining.reason + "); 'podvisor uncordon' admits pods again"}
		}
		var running []admission.Pod
		for _, p := range held {
			running = append(running, admission.FromPod(p))
		}
		dec := admission.Admit(admission.FromPod(candidate), running, admission.Node{Allocatable: alloc, Pressure: p.conditions})
		return lifecycle.Admission{Admit: dec.Admit, Reason: dec.Reason, Message: dec.Message, Victims: dec.Victims, Resource: string(dec.Resource)}
	}
}

// NodeView is the device as a v1.Node, with the annotations given.
func (p *Protector) NodeView(annotations map[string]string) *v1.Node {
	capacity := p.capacity()
	conds := []v1.NodeCondition{}
	// The kubelet's reasons, so tools that read them keep working.
	reasons := map[v1.NodeConditionType][2]string{
		v1.NodeMemoryPressure: {"KubeletHasSufficientMemory", "KubeletHasInsufficientMemory"},
		v1.NodeDiskPressure:   {"KubeletHasNoDiskPressure", "KubeletHasDiskPressure"},
		v1.NodePIDPressure:    {"KubeletHasSufficientPID", "KubeletHasInsufficientPID"},
	}
	for _, t := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		st, reason := v1.ConditionFalse, reasons[t][0]
		if p.conditions[t] {
			st, reason = v1.ConditionTrue, reasons[t][1]
		}
		conds = append(conds, v1.NodeCondition{Type: t, Status: st, Reason: reason, LastHeartbeatTime: metav1.Now()})
	}
	conds = append(conds, v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
		Message: "podvisor is posting ready status", LastHeartbeatTime: metav1.Now()})
	var uts unix.Utsname
	unix.Uname(&uts)
	osImage := "Linux"
	if data, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				osImage = strings.Trim(v, `"`)
			}
		}
	}
	// A drained node is cordoned: unschedulable, with the taint the node
	// lifecycle controller gives it; get node shows SchedulingDisabled.
	var spec v1.NodeSpec
	if p.draining != nil {
		spec.Unschedulable = true
		spec.Taints = []v1.Taint{{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}}
	}
	return &v1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		Spec:     spec,
		ObjectMeta: metav1.ObjectMeta{Name: p.nodeName, Labels: map[string]string{"kubernetes.io/hostname": p.nodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": runtime.GOARCH},
			Annotations: annotations},
		Status: v1.NodeStatus{
			Capacity: capacity, Allocatable: p.allocatable(capacity), Conditions: conds,
			Addresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: p.nodeName}, {Type: v1.NodeInternalIP, Address: p.hostIP}},
			NodeInfo: v1.NodeSystemInfo{
				KernelVersion: unix.ByteSliceToString(uts.Release[:]), OSImage: osImage, OperatingSystem: "linux",
				Architecture: runtime.GOARCH, KubeletVersion: "podvisor " + p.node.Version,
			},
		},
	}
}
