package workloads

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// create asks the API server for a controller's new pod: admitted, it
// joins the books; refused (admission, or the hub's MaxPods as a pod
// quota), the workload gets a FailedCreate event, once per pass.
func (k *controllers) create(p *v1.Pod, kind string, owner metav1.ObjectMeta) {
	key := types.NamespacedName{Namespace: owner.Namespace, Name: kind + "/" + owner.Name}
	if k.overQuota[key] {
		return // refused once this pass: one event says so
	}
	err := k.c.Admit(p)
	if held := k.c.Count(); err == nil && k.maxPods > 0 && held >= k.maxPods {
		k.overQuota[key] = true
		err = fmt.Errorf("pods %q is forbidden: exceeded quota: podhub, requested: pods=1, used: pods=%d, limited: pods=%d",
			p.Name, held, k.maxPods)
	}
	if err != nil {
		k.c.Event(Event{Kind: kind, Namespace: owner.Namespace, Name: owner.Name,
			Type: v1.EventTypeWarning, Reason: "FailedCreate", Message: "Error creating: " + err.Error()})
		return
	}
	k.c.Add(p)
}
