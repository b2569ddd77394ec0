package kubeapi

import (
	"runtime"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// resource is one served resource as discovery describes it.
type resource struct {
	group, version, name, singular, kind string
	namespaced                           bool
	shortNames, categories               []string
	// review is a SelfSubject…Review: created (POST), never stored.
	review bool
}

func (r *resource) groupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.group, Resource: r.name}
}

func (r *resource) apiVersion() string {
	if r.group == "" {
		return r.version
	}
	return r.group + "/" + r.version
}

// readVerbs are all this API does to a stored resource.
var readVerbs = metav1.Verbs{"get", "list", "watch"}

// The resources served, in discovery's order. Never Secrets or
// ConfigMaps: a viewer of the fleet does not read them.
var (
	resNodes           = &resource{version: "v1", name: "nodes", singular: "node", kind: "Node", shortNames: []string{"no"}}
	resPods            = &resource{version: "v1", name: "pods", singular: "pod", kind: "Pod", namespaced: true, shortNames: []string{"po"}, categories: []string{"all"}}
	resEvents          = &resource{version: "v1", name: "events", singular: "event", kind: "Event", namespaced: true, shortNames: []string{"ev"}}
	resServices        = &resource{version: "v1", name: "services", singular: "service", kind: "Service", namespaced: true, shortNames: []string{"svc"}, categories: []string{"all"}}
	resNamespaces      = &resource{version: "v1", name: "namespaces", singular: "namespace", kind: "Namespace", shortNames: []string{"ns"}}
	resDeployments     = &resource{group: "apps", version: "v1", name: "deployments", singular: "deployment", kind: "Deployment", namespaced: true, shortNames: []string{"deploy"}, categories: []string{"all"}}
	resDaemonSets      = &resource{group: "apps", version: "v1", name: "daemonsets", singular: "daemonset", kind: "DaemonSet", namespaced: true, shortNames: []string{"ds"}, categories: []string{"all"}}
	resReplicaSets     = &resource{group: "apps", version: "v1", name: "replicasets", singular: "replicaset", kind: "ReplicaSet", namespaced: true, shortNames: []string{"rs"}, categories: []string{"all"}}
	resStatefulSets    = &resource{group: "apps", version: "v1", name: "statefulsets", singular: "statefulset", kind: "StatefulSet", namespaced: true, shortNames: []string{"sts"}, categories: []string{"all"}}
	resPriorityClasses = &resource{group: "scheduling.k8s.io", version: "v1", name: "priorityclasses", singular: "priorityclass", kind: "PriorityClass", shortNames: []string{"pc"}}
	resEventsV1        = &resource{group: "events.k8s.io", version: "v1", name: "events", singular: "event", kind: "Event", namespaced: true, shortNames: []string{"ev"}}
	resPDBs            = &resource{group: "policy", version: "v1", name: "poddisruptionbudgets", singular: "poddisruptionbudget", kind: "PodDisruptionBudget", namespaced: true, shortNames: []string{"pdb"}}
	resLeases          = &resource{group: "coordination.k8s.io", version: "v1", name: "leases", singular: "lease", kind: "Lease", namespaced: true}
	// Kinds a fleet does not have, served empty (emptykinds.go says why).
	resServiceAccounts = &resource{version: "v1", name: "serviceaccounts", singular: "serviceaccount", kind: "ServiceAccount", namespaced: true, shortNames: []string{"sa"}}
	resPVs             = &resource{version: "v1", name: "persistentvolumes", singular: "persistentvolume", kind: "PersistentVolume", shortNames: []string{"pv"}}
	resPVCs            = &resource{version: "v1", name: "persistentvolumeclaims", singular: "persistentvolumeclaim", kind: "PersistentVolumeClaim", namespaced: true, shortNames: []string{"pvc"}}
	resJobs            = &resource{group: "batch", version: "v1", name: "jobs", singular: "job", kind: "Job", namespaced: true, categories: []string{"all"}}
	resCronJobs        = &resource{group: "batch", version: "v1", name: "cronjobs", singular: "cronjob", kind: "CronJob", namespaced: true, shortNames: []string{"cj"}, categories: []string{"all"}}
	resHPAs            = &resource{group: "autoscaling", version: "v1", name: "horizontalpodautoscalers", singular: "horizontalpodautoscaler", kind: "HorizontalPodAutoscaler", namespaced: true, shortNames: []string{"hpa"}, categories: []string{"all"}}
	resIngresses       = &resource{group: "networking.k8s.io", version: "v1", name: "ingresses", singular: "ingress", kind: "Ingress", namespaced: true, shortNames: []string{"ing"}}
	resNetworkPolicies = &resource{group: "networking.k8s.io", version: "v1", name: "networkpolicies", singular: "networkpolicy", kind: "NetworkPolicy", namespaced: true, shortNames: []string{"netpol"}}
	resSSAR            = &resource{group: "authorization.k8s.io", version: "v1", name: "selfsubjectaccessreviews", singular: "selfsubjectaccessreview", kind: "SelfSubjectAccessReview", review: true}
	resSSRR            = &resource{group: "authorization.k8s.io", version: "v1", name: "selfsubjectrulesreviews", singular: "selfsubjectrulesreview", kind: "SelfSubjectRulesReview", review: true}
)

var allResources = []*resource{resNodes, resPods, resEvents, resNamespaces, resServices, resServiceAccounts, resPVs, resPVCs,
	resDeployments, resDaemonSets, resReplicaSets, resStatefulSets, resJobs, resCronJobs, resHPAs, resIngresses, resNetworkPolicies,
	resPriorityClasses, resEventsV1, resPDBs, resLeases, resSSAR, resSSRR}

// groupVersions in discovery's order ("" is the core group).
var groupVersions = []schema.GroupVersion{{Version: "v1"}, {Group: "apps", Version: "v1"}, {Group: "batch", Version: "v1"},
	{Group: "autoscaling", Version: "v1"}, {Group: "networking.k8s.io", Version: "v1"}, {Group: "scheduling.k8s.io", Version: "v1"}, {Group: "events.k8s.io", Version: "v1"}, {Group: "policy", Version: "v1"}, {Group: "coordination.k8s.io", Version: "v1"},
	{Group: "authorization.k8s.io", Version: "v1"}}

// kubernetesVersion is the API level served: k8s.io/api's.
const kubernetesVersion = "v1.37.2"

// version is /version: the Kubernetes version whose API is served, with
// podhub's version as semver build metadata (clients parse gitVersion
// as semver), unless the hub's version is itself one ("v1.…").
func (s *Server) version() version.Info {
	v := s.cfg.Version
	if !strings.HasPrefix(v, "v1.") {
		meta := strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '.' {
				return r
			}
			return '-'
		}, strings.Trim(v, "."))
		v = kubernetesVersion + "+podhub"
		if meta != "" {
			v += "." + meta
		}
	}
	return version.Info{Major: "1", Minor: "37", GitVersion: v, GoVersion: runtime.Version(),
		Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// apiVersions is /api. Aggregated discovery is not served: clients fall
// back to these documents when the answer is plain application/json.
func apiVersions() *metav1.APIVersions {
	return &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0"}}}
}

// apiGroups is /apis.
func apiGroups() *metav1.APIGroupList {
	out := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, gv := range groupVersions[1:] {
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		out.Groups = append(out.Groups, metav1.APIGroup{Name: gv.Group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v})
	}
	return out
}

// resourceList is /api/v1 or /apis/GROUP/VERSION.
func resourceList(gv schema.GroupVersion) *metav1.APIResourceList {
	out := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String(),
		APIResources: []metav1.APIResource{}}
	for _, r := range allResources {
		if r.group != gv.Group || r.version != gv.Version {
			continue
		}
		verbs := readVerbs
		if r.review {
			verbs = metav1.Verbs{"create"}
		}
		out.APIResources = append(out.APIResources, metav1.APIResource{Name: r.name, SingularName: r.singular, Namespaced: r.namespaced,
			Kind: r.kind, Verbs: verbs, ShortNames: r.shortNames, Categories: r.categories})
		if r == resPods {
			out.APIResources = append(out.APIResources, metav1.APIResource{Name: "pods/log", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get"}})
		}
	}
	return out
}

// request is a parsed resource path.
type request struct {
	gv        schema.GroupVersion
	discovery bool // /api/v1, /apis/GROUP/VERSION
	res       *resource
	namespace string
	name      string
	sub       string // a subresource: "log"
}

// parsePath parses /api/v1/… and /apis/GROUP/VERSION/… (without the
// leading slash) as the API server's request-info resolver does.
func parsePath(path string) (request, error) {
	seg := strings.Split(path, "/")
	var req request
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		req.gv, seg = schema.GroupVersion{Version: seg[1]}, seg[2:]
	case len(seg) >= 3 && seg[0] == "apis":
		req.gv, seg = schema.GroupVersion{Group: seg[1], Version: seg[2]}, seg[3:]
	default:
		return req, notFoundPath(path)
	}
	known := false
	for _, gv := range groupVersions {
		known = known || gv == req.gv
	}
	if !known {
		return req, notFoundPath(path)
	}
	if len(seg) == 0 {
		req.discovery = true
		return req, nil
	}
	// namespaces/NS/RESOURCE… is a namespaced path; namespaces and
	// namespaces/NAME are the namespaces themselves.
	if seg[0] == "namespaces" && len(seg) >= 3 {
		req.namespace, seg = seg[1], seg[2:]
	}
	res := lookup(req.gv, seg[0])
	if res == nil || (req.namespace != "" && !res.namespaced) {
		return req, notFoundPath(path)
	}
	req.res = res
	if len(seg) > 1 {
		req.name = seg[1]
	}
	if len(seg) > 2 {
		req.sub = strings.Join(seg[2:], "/")
	}
	if len(seg) > 3 || req.name == "" && len(seg) > 1 {
		return req, notFoundPath(path)
	}
	return req, nil
}

func lookup(gv schema.GroupVersion, name string) *resource {
	for _, r := range allResources {
		if r.group == gv.Group && r.version == gv.Version && r.name == name {
			return r
		}
	}
	return nil
}

// notFoundPath is the API server's answer to a path it does not serve.
func notFoundPath(path string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 404,
		Reason: metav1.StatusReasonNotFound, Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: "404 page not found: /" + path}}}}}
}
