package kubeapi

import (
	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// The API server keeps one Event and serves it in both groups: core v1
// (kubectl describe, kubectl get events) and events.k8s.io/v1 (k9s's
// events view, client-go's new recorder). Here each device's core events
// are also stored converted, so a list or watch of either group sees the
// same events with the same names and UIDs.

// eventV1Of converts a core Event as the API server does
// (pkg/apis/events/v1 conversion): message is note, involvedObject is
// regarding, and the core's own fields keep a deprecated* name.
func eventV1Of(e *v1.Event) *eventsv1.Event {
	out := &eventsv1.Event{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "events.k8s.io/v1"},
		ObjectMeta: *e.ObjectMeta.DeepCopy(), EventTime: e.EventTime, ReportingController: e.ReportingController,
		ReportingInstance: e.ReportingInstance, Action: e.Action, Reason: e.Reason, Regarding: e.InvolvedObject,
		Related: e.Related, Note: e.Message, Type: e.Type, DeprecatedSource: e.Source,
		DeprecatedFirstTimestamp: e.FirstTimestamp, DeprecatedLastTimestamp: e.LastTimestamp, DeprecatedCount: e.Count}
	if e.Series != nil {
		out.Series = &eventsv1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	return out
}

// coreEventOf is the reverse, for the Table's cells (the API server
// prints both groups' events with the same columns).
func coreEventOf(e *eventsv1.Event) *v1.Event {
	out := &v1.Event{ObjectMeta: e.ObjectMeta, InvolvedObject: e.Regarding, Related: e.Related, Reason: e.Reason, Message: e.Note,
		Source: e.DeprecatedSource, FirstTimestamp: e.DeprecatedFirstTimestamp, LastTimestamp: e.DeprecatedLastTimestamp,
		Count: e.DeprecatedCount, Type: e.Type, EventTime: e.EventTime, Action: e.Action,
		ReportingController: e.ReportingController, ReportingInstance: e.ReportingInstance}
	if e.Series != nil {
		out.Series = &v1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	return out
}

// eventsV1Objects are a source's core event objects in events.k8s.io/v1.
func eventsV1Objects(core []*object) []*object {
	out := make([]*object, 0, len(core))
	for _, o := range core {
		e, ok := o.obj.(*v1.Event)
		if !ok {
			continue
		}
		v := eventV1Of(e)
		out = append(out, &object{obj: v, fields: eventV1Fields(v)})
	}
	return out
}

// eventV1Fields are the field labels events.k8s.io/v1 supports, under
// its own names (regarding.*, reportingController), as its field label
// conversion maps them.
func eventV1Fields(e *eventsv1.Event) fields.Set {
	f := metaFields(e)
	f["regarding.kind"] = e.Regarding.Kind
	f["regarding.namespace"] = e.Regarding.Namespace
	f["regarding.name"] = e.Regarding.Name
	f["regarding.uid"] = string(e.Regarding.UID)
	f["regarding.apiVersion"] = e.Regarding.APIVersion
	f["regarding.resourceVersion"] = e.Regarding.ResourceVersion
	f["regarding.fieldPath"] = e.Regarding.FieldPath
	f["reason"] = e.Reason
	f["reportingController"] = e.ReportingController
	f["type"] = e.Type
	return f
}
