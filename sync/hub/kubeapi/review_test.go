package kubeapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// postReview posts a review's body with a Content-Type and decodes the
// answer (always JSON).
func postReview(t *testing.T, f *fixture, resource, contentType string, body []byte, out any) int {
	t.Helper()
	resp, err := http.Post(f.srv.URL+"/apis/authorization.k8s.io/v1/"+resource, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s answered %q", resource, ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s: decoding the answer: %v", resource, err)
	}
	return resp.StatusCode
}

// k9s's clientset sends its reviews as Kubernetes protobuf (its rest
// config's ContentType), encoded here by the serializer client-go uses.
func TestReviewProtobuf(t *testing.T) {
	f := newFixture(t, Config{})
	s := runtime.NewScheme()
	if err := authorizationv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	enc := protobuf.NewSerializer(s, s)
	encode := func(obj runtime.Object) []byte {
		var b bytes.Buffer
		if err := enc.Encode(obj, &b); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b.Bytes(), []byte("k8s\x00")) {
			t.Fatalf("not the protobuf envelope: %q", b.Bytes())
		}
		return b.Bytes()
	}
	typ := metav1.TypeMeta{Kind: "SelfSubjectAccessReview", APIVersion: "authorization.k8s.io/v1"}
	for _, c := range []struct {
		verb, resource, sub string
		want                bool
	}{{"list", "pods", "", true}, {"get", "pods", "log", true}, {"delete", "pods", "", false}, {"list", "secrets", "", false}} {
		in := &authorizationv1.SelfSubjectAccessReview{TypeMeta: typ, Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: c.verb, Version: "v1", Resource: c.resource, Subresource: c.sub}}}
		var out authorizationv1.SelfSubjectAccessReview
		code := postReview(t, f, "selfsubjectaccessreviews", runtime.ContentTypeProtobuf, encode(in), &out)
		if code != http.StatusCreated || out.Status.Allowed != c.want || out.Spec.ResourceAttributes == nil || out.Spec.ResourceAttributes.Resource != c.resource {
			t.Errorf("%s %s/%s: %d %+v", c.verb, c.resource, c.sub, code, out)
		}
	}
	rules := &authorizationv1.SelfSubjectRulesReview{TypeMeta: metav1.TypeMeta{Kind: "SelfSubjectRulesReview", APIVersion: "authorization.k8s.io/v1"},
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "default"}}
	var out authorizationv1.SelfSubjectRulesReview
	if code := postReview(t, f, "selfsubjectrulesreviews", runtime.ContentTypeProtobuf, encode(rules), &out); code != http.StatusCreated ||
		out.Spec.Namespace != "default" || len(out.Status.ResourceRules) == 0 {
		t.Errorf("rules review: %d %+v", code, out)
	}
	// A protobuf body without the envelope, and a type not read: the
	// API server's 400 and 415.
	var st metav1.Status
	if code := postReview(t, f, "selfsubjectaccessreviews", runtime.ContentTypeProtobuf, []byte("{}"), &st); code != http.StatusBadRequest ||
		!strings.Contains(st.Message, "decoding SelfSubjectAccessReview") {
		t.Errorf("bad protobuf: %d %+v", code, st)
	}
	st = metav1.Status{}
	if code := postReview(t, f, "selfsubjectaccessreviews", "application/xml", []byte("<x/>"), &st); code != http.StatusUnsupportedMediaType ||
		st.Reason != metav1.StatusReasonUnsupportedMediaType ||
		st.Message != "the body of the request was in an unknown format - accepted media types include: application/json, application/vnd.kubernetes.protobuf" {
		t.Errorf("xml: %d %+v", code, st)
	}
}
