package kubeapi

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// The field labels each resource supports in a fieldSelector, as the API
// server's (pkg/registry/*/strategy.go); any other is refused with its
// "field label not supported" BadRequest.
var fieldLabels = map[*resource][]string{
	resPods: {"metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
		"spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
	resNodes: {"metadata.name", "spec.unschedulable"},
	resEvents: {"metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
		"involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
		"reason", "reportingComponent", "source", "type"},
	resEventsV1: {"metadata.name", "metadata.namespace", "regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
		"regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath", "reason", "reportingController", "type"},
	resNamespaces: {"metadata.name", "status.phase"},
}

func metaFields(o metav1.Object) fields.Set {
	return fields.Set{"metadata.name": o.GetName(), "metadata.namespace": o.GetNamespace()}
}

func nodeObject(n *v1.Node) *object {
	f := metaFields(n)
	delete(f, "metadata.namespace")
	f["spec.unschedulable"] = fmt.Sprint(n.Spec.Unschedulable)
	return &object{obj: n, fields: f}
}

func podFields(p *v1.Pod) fields.Set {
	f := metaFields(p)
	f["spec.nodeName"] = p.Spec.NodeName
	f["spec.restartPolicy"] = string(p.Spec.RestartPolicy)
	f["spec.schedulerName"] = p.Spec.SchedulerName
	f["spec.serviceAccountName"] = p.Spec.ServiceAccountName
	f["spec.hostNetwork"] = fmt.Sprint(p.Spec.HostNetwork)
	f["status.phase"] = string(p.Status.Phase)
	f["status.podIP"] = p.Status.PodIP
	f["status.nominatedNodeName"] = p.Status.NominatedNodeName
	return f
}

func eventFields(e *v1.Event) fields.Set {
	f := metaFields(e)
	f["involvedObject.kind"] = e.InvolvedObject.Kind
	f["involvedObject.namespace"] = e.InvolvedObject.Namespace
	f["involvedObject.name"] = e.InvolvedObject.Name
	f["involvedObject.uid"] = string(e.InvolvedObject.UID)
	f["involvedObject.apiVersion"] = e.InvolvedObject.APIVersion
	f["involvedObject.resourceVersion"] = e.InvolvedObject.ResourceVersion
	f["involvedObject.fieldPath"] = e.InvolvedObject.FieldPath
	f["reason"] = e.Reason
	f["reportingComponent"] = e.ReportingController
	f["source"] = e.Source.Component
	f["type"] = e.Type
	return f
}

func namespaceFields(ns *v1.Namespace) fields.Set {
	return fields.Set{"metadata.name": ns.Name, "status.phase": string(ns.Status.Phase)}
}

// selectors parses a request's labelSelector and fieldSelector, refusing
// a field the resource does not index as the API server does.
func selectors(res *resource, label, field string) (labels.Selector, fields.Selector, error) {
	ls, err := labels.Parse(label)
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("unable to parse requirement: %v", err))
	}
	fs, err := fields.ParseSelector(field)
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("invalid field selector: %v", err))
	}
	allowed := fieldLabels[res]
	if allowed == nil {
		allowed = []string{"metadata.name", "metadata.namespace"}
	}
	for _, req := range fs.Requirements() {
		ok := false
		for _, a := range allowed {
			ok = ok || a == req.Field
		}
		if !ok {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	return ls, fs, nil
}
