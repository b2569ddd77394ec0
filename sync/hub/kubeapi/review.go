package kubeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// maxReviewBody bounds a review's request body.
const maxReviewBody = 64 << 10

// review answers SelfSubjectAccessReview and SelfSubjectRulesReview
// (POST only) as the viewer everyone entering the hub is: get, list and
// watch of what is served, nothing else. k9s and Headlamp ask before
// they offer an action.
func (s *Server) review(w http.ResponseWriter, r *http.Request, req request) {
	if r.Method != http.MethodPost || req.name != "" || req.namespace != "" {
		writeStatus(w, apierrors.NewMethodNotSupported(req.res.groupResource(), verbOf(r.Method)))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBody+1))
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err)))
		return
	}
	if len(body) > maxReviewBody {
		writeStatus(w, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", maxReviewBody)))
		return
	}
	switch req.res {
	case resSSAR:
		var in authorizationv1.SelfSubjectAccessReview
		if err := decodeReview(r.Header.Get("Content-Type"), body, &in, req.res.kind); err != nil {
			writeStatus(w, err)
			return
		}
		in.Kind, in.APIVersion = "SelfSubjectAccessReview", "authorization.k8s.io/v1"
		in.Status = accessReview(in.Spec)
		writeJSON(w, http.StatusCreated, &in)
	case resSSRR:
		var in authorizationv1.SelfSubjectRulesReview
		if err := decodeReview(r.Header.Get("Content-Type"), body, &in, req.res.kind); err != nil {
			writeStatus(w, err)
			return
		}
		in.Kind, in.APIVersion = "SelfSubjectRulesReview", "authorization.k8s.io/v1"
		in.Status = rulesReview()
		writeJSON(w, http.StatusCreated, &in)
	}
}

// reviewScheme knows the two reviews, for the protobuf decoder.
var reviewScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := authorizationv1.AddToScheme(s); err != nil {
		panic(err) // a static registration: fails in every test or never
	}
	return s
}()

// decodeReview reads a review's body in the encoding its Content-Type
// names: JSON (kubectl auth can-i), or Kubernetes protobuf, which k9s's
// clientset sends (ContentType application/vnd.kubernetes.protobuf) and
// the API server accepts. Another type is the API server's 415.
func decodeReview(contentType string, body []byte, into runtime.Object, kind string) error {
	typ := "application/json"
	if contentType != "" {
		t, _, err := mime.ParseMediaType(contentType)
		if err != nil {
			return unsupportedMediaType()
		}
		typ = t
	}
	var err error
	switch typ {
	case "application/json":
		err = json.Unmarshal(body, into)
	case runtime.ContentTypeProtobuf:
		_, _, err = protobuf.NewSerializer(reviewScheme, reviewScheme).Decode(body, nil, into)
	default:
		return unsupportedMediaType()
	}
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("decoding %s: %v", kind, err))
	}
	return nil
}

// unsupportedMediaType is the API server's answer to a body it cannot
// read (k8s.io/apiserver's negotiation.NewUnsupportedMediaTypeError).
func unsupportedMediaType() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
		Reason: metav1.StatusReasonUnsupportedMediaType, Message: "the body of the request was in an unknown format - accepted media types include: " +
			"application/json, " + runtime.ContentTypeProtobuf}}
}

// viewerVerb says a verb is one a viewer has.
func viewerVerb(verb string) bool {
	return verb == "get" || verb == "list" || verb == "watch"
}

// accessReview answers one question.
func accessReview(spec authorizationv1.SelfSubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
	if n := spec.NonResourceAttributes; n != nil {
		if n.Verb == "get" {
			return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "podhub: every viewer reads discovery"}
		}
		return authorizationv1.SubjectAccessReviewStatus{Reason: "podhub's Kubernetes API is read-only"}
	}
	a := spec.ResourceAttributes
	if a == nil {
		return authorizationv1.SubjectAccessReviewStatus{EvaluationError: "neither resourceAttributes nor nonResourceAttributes"}
	}
	if !viewerVerb(a.Verb) {
		return authorizationv1.SubjectAccessReviewStatus{Reason: "podhub's Kubernetes API is read-only"}
	}
	for _, res := range allResources {
		if res.review || res.group != a.Group || (res.name != a.Resource && a.Resource != "*") {
			continue
		}
		if a.Subresource == "" || (res == resPods && a.Subresource == "log" && a.Verb == "get") {
			return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "podhub: viewers get, list and watch the fleet"}
		}
	}
	return authorizationv1.SubjectAccessReviewStatus{Reason: fmt.Sprintf("podhub does not serve %q in group %q", a.Resource, a.Group)}
}

// rulesReview lists what a viewer may do.
func rulesReview() authorizationv1.SubjectRulesReviewStatus {
	byGroup := map[string][]string{}
	var groups []string
	for _, res := range allResources {
		if res.review {
			continue
		}
		if _, ok := byGroup[res.group]; !ok {
			groups = append(groups, res.group)
		}
		byGroup[res.group] = append(byGroup[res.group], res.name)
	}
	out := authorizationv1.SubjectRulesReviewStatus{ResourceRules: []authorizationv1.ResourceRule{}}
	for _, g := range groups {
		out.ResourceRules = append(out.ResourceRules, authorizationv1.ResourceRule{Verbs: []string{"get", "list", "watch"},
			APIGroups: []string{g}, Resources: byGroup[g]})
	}
	out.ResourceRules = append(out.ResourceRules,
		authorizationv1.ResourceRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods/log"}},
		authorizationv1.ResourceRule{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"},
			Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}})
	out.NonResourceRules = []authorizationv1.NonResourceRule{{Verbs: []string{"get"},
		NonResourceURLs: []string{"/api", "/api/*", "/apis", "/apis/*", "/version", "/healthz", "/livez", "/readyz"}}}
	return out
}
