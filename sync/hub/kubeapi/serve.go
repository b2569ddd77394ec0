package kubeapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }

// tableAs is the Table version a request's Accept asks for ("v1",
// "v1beta1"), or "" for plain objects.
func tableAs(r *http.Request) string {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		typ, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || typ != "application/json" {
			continue
		}
		if params["as"] == "Table" && params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
			return params["v"]
		}
	}
	return ""
}

// metadataAs says the Accept asks for metadata only
// (as=PartialObjectMetadata or as=PartialObjectMetadataList, the
// metadata client's and its informers').
func metadataAs(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		typ, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && typ == "application/json" && params["g"] == "meta.k8s.io" && params["v"] == "v1" &&
			(params["as"] == "PartialObjectMetadata" || params["as"] == "PartialObjectMetadataList") {
			return true
		}
	}
	return false
}

// partial is an object's metadata as a PartialObjectMetadata.
func partial(o *object) []byte {
	m := metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}}
	m.ObjectMeta = *objectMeta(o.obj)
	b, _ := json.Marshal(m)
	return b
}

// tableOptions are a Table request's: which version, and what each row
// carries of its object (includeObject: Metadata by default).
type tableOptions struct {
	version string
	include string
}

func tableOf(r *http.Request) (*tableOptions, error) {
	v := tableAs(r)
	if v == "" {
		return nil, nil
	}
	inc := r.URL.Query().Get("includeObject")
	switch inc {
	case "":
		inc = "Metadata"
	case "None", "Metadata", "Object":
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("includeObject: Unsupported value: %q: supported values: \"None\", \"Metadata\", \"Object\"", inc))
	}
	return &tableOptions{version: v, include: inc}, nil
}

// table is objs as a Table.
func (s *Server) table(t *tableOptions, res *resource, objs []*object) *metav1.Table {
	out := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/" + t.version},
		ColumnDefinitions: columnsOf(res), Rows: make([]metav1.TableRow, 0, len(objs))}
	now := s.cfg.Now()
	for _, o := range objs {
		row := metav1.TableRow{Cells: cellsOf(o.obj, now)}
		switch t.include {
		case "Object":
			row.Object = runtime.RawExtension{Raw: o.raw}
		case "Metadata":
			row.Object = runtime.RawExtension{Raw: partial(o)}
		}
		out.Rows = append(out.Rows, row)
	}
	return out
}

// objectMeta copies an object's metadata (managedFields left out, as
// the API server leaves them out of a Table's rows).
func objectMeta(o kobject) *metav1.ObjectMeta {
	m := &metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
		CreationTimestamp: o.GetCreationTimestamp(), DeletionTimestamp: o.GetDeletionTimestamp(), Labels: o.GetLabels(),
		Annotations: o.GetAnnotations(), OwnerReferences: o.GetOwnerReferences(), Generation: o.GetGeneration()}
	return m
}

// get serves one object.
func (s *Server) get(w http.ResponseWriter, r *http.Request, req request) {
	if req.res.namespaced && req.namespace == "" {
		writeStatus(w, notFoundPath(strings.Trim(r.URL.Path, "/")))
		return
	}
	t, err := tableOf(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	o := s.store.get(req.res, req.namespace, req.name)
	if o == nil {
		writeStatus(w, apierrors.NewNotFound(req.res.groupResource(), req.name))
		return
	}
	if t != nil {
		tbl := s.table(t, req.res, []*object{o})
		tbl.ResourceVersion = o.obj.GetResourceVersion()
		writeJSON(w, http.StatusOK, tbl)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if metadataAs(r) {
		w.Write(partial(o))
		return
	}
	w.Write(o.raw)
}

// continueToken is the list's position, shaped as the API server's
// (base64 of its JSON).
type continueToken struct {
	APIVersion string `json:"v"`
	RV         uint64 `json:"rv"`
	Start      string `json:"start"`
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || t.APIVersion != "meta.k8s.io/v1" {
		return t, apierrors.NewBadRequest("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
	}
	return t, nil
}

func encodeContinue(rv uint64, last string) string {
	b, _ := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", RV: rv, Start: last + "\x00"})
	return base64.RawURLEncoding.EncodeToString(b)
}

// list serves a collection, in chunks when limit is set, or a watch.
func (s *Server) list(w http.ResponseWriter, r *http.Request, req request) {
	q := r.URL.Query()
	ls, fs, err := selectors(req.res, q.Get("labelSelector"), q.Get("fieldSelector"))
	if err != nil {
		writeStatus(w, err)
		return
	}
	if watch := q.Get("watch"); watch == "1" || watch == "true" {
		s.watch(w, r, req, ls, fs)
		return
	}
	t, err := tableOf(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	var start string
	var fixedRV uint64
	if c := q.Get("continue"); c != "" {
		tok, err := decodeContinue(c)
		if err != nil {
			writeStatus(w, err)
			return
		}
		start, fixedRV = tok.Start, tok.RV
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit < 0 {
		limit = 0
	}
	objs, rv, more := s.store.list(req.res, req.namespace, ls, fs, start, limit)
	if req.res == resEvents && start == "" {
		objs = append(objs, s.hubEvents(fs, req.namespace)...)
	}
	if fixedRV != 0 {
		rv = fixedRV // every chunk of a list says the version of its first
	}
	var meta metav1.ListMeta
	meta.ResourceVersion = strconv.FormatUint(rv, 10)
	if more > 0 {
		rest := int64(more)
		meta.Continue = encodeContinue(rv, objs[len(objs)-1].key)
		meta.RemainingItemCount = &rest
	}
	if t != nil {
		tbl := s.table(t, req.res, objs)
		tbl.ListMeta = meta
		writeJSON(w, http.StatusOK, tbl)
		return
	}
	var buf bytes.Buffer
	m, _ := json.Marshal(meta)
	kind, apiVersion, item := req.res.kind+"List", req.res.apiVersion(), func(o *object) []byte { return o.raw }
	if metadataAs(r) {
		kind, apiVersion, item = "PartialObjectMetadataList", "meta.k8s.io/v1", partial
	}
	fmt.Fprintf(&buf, `{"kind":%q,"apiVersion":%q,"metadata":%s,"items":[`, kind, apiVersion, m)
	for i, o := range objs {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(item(o))
	}
	buf.WriteString("]}")
	w.Header().Set("Content-Type", "application/json")
	w.Write(buf.Bytes())
}
