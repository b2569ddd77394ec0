package disruption

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// 1,000 budgets over 1,000 Deployments of 10 pods each (10,000 pods) and
// 10,000 pods no budget selects: one sync, as a pass runs it.
func BenchmarkSync1000Budgets(b *testing.B) {
	var in Input
	in.Now = t0
	for d := 0; d < 1000; d++ {
		name := fmt.Sprintf("app-%d", d)
		in.Scales = append(in.Scales, Scale{Kind: "Deployment", Namespace: "default", Name: name, UID: types.UID(name), Replicas: 10})
		pdb := budget(name, nil, ptr(intstr.FromString("20%")))
		pdb.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
		in.PDBs = append(in.PDBs, pdb)
		for i := 0; i < 10; i++ {
			p := webPod(fmt.Sprintf("%s-h-%d", name, i), true)
			p.Pod.Labels = map[string]string{"app": name, workloads.LabelPodTemplateHash: "h"}
			p.Pod.OwnerReferences[0].Name, p.Pod.OwnerReferences[0].UID = name+"-h", types.UID(name+"-h")
			in.Pods = append(in.Pods, p)
		}
	}
	for i := 0; i < 10000; i++ {
		p := webPod(fmt.Sprintf("agent-%d", i), true)
		p.Pod.Labels = map[string]string{"app": "agent"}
		in.Pods = append(in.Pods, p)
	}
	b.ResetTimer()
	for b.Loop() {
		res := Sync(in)
		if res.PDBs[0].Status.DisruptionsAllowed != 2 {
			b.Fatalf("status %+v", res.PDBs[0].Status)
		}
	}
}
