package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
)

// ObjectItem is one ConfigMap or Secret of a list: its entry, and the
// object when asked for (?objects=true), a Secret's without its data
// (RedactSecret). A Secret's values never leave the hub through its API.
type ObjectItem struct {
	objectdb.Entry
	Object json.RawMessage `json:"object,omitempty"`
}

// ObjectDetail is describe's answer: the object (a Secret's redacted),
// the bytes of each of a Secret's values, and the object's events.
type ObjectDetail struct {
	objectdb.Entry
	Object json.RawMessage         `json:"object"`
	Sizes  map[string]int          `json:"sizes,omitempty"`
	Events []workloaddb.SchedEvent `json:"events"`
}

// objectKinds are the API's path names of the kinds objectdb keeps.
var objectKinds = map[string]objects.Kind{"configmaps": objects.ConfigMap, "secrets": objects.Secret}

func objectKind(name string) (objects.Kind, error) {
	if k, ok := objectKinds[name]; ok {
		return k, nil
	}
	return "", fmt.Errorf("unknown kind %q (configmaps, secrets): %w", name, fleetdb.ErrNotFound)
}

func (a *API) objectRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/objects/{kind}", func(w http.ResponseWriter, r *http.Request) {
		kind, err := objectKind(r.PathValue("kind"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		full, _ := strconv.ParseBool(r.URL.Query().Get("objects"))
		items, err := a.listObjects(kind, r.URL.Query().Get("namespace"), full)
		reply(w, items, err)
	})
	mux.HandleFunc("GET /v1/objects/{kind}/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		kind, err := objectKind(r.PathValue("kind"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		d, err := a.objectDetail(objects.Ref{Kind: kind, Namespace: r.PathValue("namespace"), Name: r.PathValue("name")})
		reply(w, d, err)
	})
	mux.HandleFunc("DELETE /v1/objects/{kind}/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		kind, err := objectKind(r.PathValue("kind"))
		if err == nil {
			// Pods that use it stay as they are, and find it missing.
			ref := objects.Ref{Kind: kind, Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
			if err = a.Objects.Delete(ref); err == nil {
				err = a.Workloads.ForgetEvents(string(kind), ref.Namespace, ref.Name)
			}
		}
		reply(w, map[string]string{}, err)
	})
}

// listObjects lists a kind's entries in namespace ("": all), with their
// objects when full.
func (a *API) listObjects(kind objects.Kind, namespace string, full bool) ([]ObjectItem, error) {
	entries, err := a.Objects.Entries(kind, namespace)
	if err != nil {
		return nil, err
	}
	out := make([]ObjectItem, len(entries))
	for i, e := range entries {
		out[i].Entry = e
	}
	if !full {
		return out, nil
	}
	var raws []json.RawMessage
	switch kind {
	case objects.ConfigMap:
		cms, err := a.Objects.ConfigMaps(namespace)
		if err != nil {
			return nil, err
		}
		for _, cm := range cms {
			raw, _ := json.Marshal(cm)
			raws = append(raws, raw)
		}
	case objects.Secret:
		secs, err := a.Objects.Secrets(namespace)
		if err != nil {
			return nil, err
		}
		for _, s := range secs {
			raw, _ := json.Marshal(RedactSecret(s))
			raws = append(raws, raw)
		}
	}
	if len(raws) != len(out) {
		return nil, fmt.Errorf("the %s changed while listed: try again", kind)
	}
	for i := range out {
		out[i].Object = raws[i]
	}
	return out, nil
}

func (a *API) objectDetail(ref objects.Ref) (ObjectDetail, error) {
	var d ObjectDetail
	switch ref.Kind {
	case objects.ConfigMap:
		cm, err := a.Objects.ConfigMap(ref.Namespace, ref.Name)
		if err != nil {
			return d, err
		}
		d.Object, _ = json.Marshal(cm)
		d.Entry = entryOf(objects.FromConfigMap(cm), len(cm.Data)+len(cm.BinaryData), cm.CreationTimestamp.Time)
	case objects.Secret:
		s, err := a.Objects.Secret(ref.Namespace, ref.Name)
		if err != nil {
			return d, err
		}
		d.Object, _ = json.Marshal(RedactSecret(s))
		d.Sizes = map[string]int{}
		for k, v := range s.Data {
			d.Sizes[k] = len(v)
		}
		d.Entry = entryOf(objects.FromSecret(s), len(s.Data), s.CreationTimestamp.Time)
	}
	var err error
	d.Events, err = a.Workloads.ObjectEvents(string(ref.Kind), ref.Namespace, ref.Name)
	return d, err
}

// RedactSecret is a copy of a Secret without what would show its values:
// its data and stringData, and kubectl's last-applied annotation (which
// repeats them when the file came from kubectl apply).
func RedactSecret(s *v1.Secret) *v1.Secret {
	out := s.DeepCopy()
	out.Data, out.StringData = nil, nil
	delete(out.Annotations, v1.LastAppliedConfigAnnotation)
	return out
}

func entryOf(o *objects.Object, keys int, created time.Time) objectdb.Entry {
	return objectdb.Entry{Ref: o.Ref, UID: o.UID, ResourceVersion: o.ResourceVersion, Immutable: o.Immutable, Type: o.Type,
		Keys: keys, Created: created}
}
