package objects

import (
	v1 "k8s.io/api/core/v1"
)

// Use is one way a pod refers to an object.
type Use struct {
	Ref
	// Optional: the pod starts without it (optional: true).
	Optional bool
}

// Refs are the objects a pod references, in the order it names them, each
// once (non-optional if any of its uses is): volumes (configMap, secret,
// projected sources), env valueFrom and envFrom of every container
// (init, sidecar, regular; ephemeral containers too), and
// imagePullSecrets. It is the Node authorizer's graph for one pod: what a
// device may receive.
func Refs(pod *v1.Pod) []Use {
	var out []Use
	seen := map[Ref]int{}
	add := func(kind Kind, name string, optional *bool) {
		if name == "" {
			return
		}
		r := Ref{Kind: kind, Namespace: pod.Namespace, Name: name}
		opt := optional != nil && *optional
		if i, ok := seen[r]; ok {
			out[i].Optional = out[i].Optional && opt
			return
		}
		seen[r] = len(out)
		out = append(out, Use{Ref: r, Optional: opt})
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add(ConfigMap, v.ConfigMap.Name, v.ConfigMap.Optional)
		case v.Secret != nil:
			add(Secret, v.Secret.SecretName, v.Secret.Optional)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add(ConfigMap, s.ConfigMap.Name, s.ConfigMap.Optional)
				}
				if s.Secret != nil {
					add(Secret, s.Secret.Name, s.Secret.Optional)
				}
			}
		}
	}
	containers := func(cs []v1.Container) {
		for _, c := range cs {
			for _, e := range c.EnvFrom {
				if e.ConfigMapRef != nil {
					add(ConfigMap, e.ConfigMapRef.Name, e.ConfigMapRef.Optional)
				}
				if e.SecretRef != nil {
					add(Secret, e.SecretRef.Name, e.SecretRef.Optional)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if k := e.ValueFrom.ConfigMapKeyRef; k != nil {
					add(ConfigMap, k.Name, k.Optional)
				}
				if k := e.ValueFrom.SecretKeyRef; k != nil {
					add(Secret, k.Name, k.Optional)
				}
			}
		}
	}
	containers(pod.Spec.InitContainers)
	containers(pod.Spec.Containers)
	for _, ec := range pod.Spec.EphemeralContainers {
		containers([]v1.Container{v1.Container(ec.EphemeralContainerCommon)})
	}
	// The kubelet pulls without a pull secret it cannot find (an event,
	// FailedToRetrieveImagePullSecret, says so): never waited for.
	optional := true
	for _, s := range pod.Spec.ImagePullSecrets {
		add(Secret, s.Name, &optional)
	}
	return out
}
