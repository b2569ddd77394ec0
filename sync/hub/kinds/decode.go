// Package kinds decodes what `podhub apply -f` accepts: multi-document
// YAML or JSON of apps/v1 DaemonSet, Deployment and StatefulSet, v1 Pod,
// ConfigMap and Secret, scheduling.k8s.io/v1 PriorityClass and policy/v1
// PodDisruptionBudget, strictly (unknown kinds and fields
// are errors), defaulted and validated as the API server would, with
// errors that name the file, the document, the object and the field.
package kinds

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/protocol"
)

// MaxDocuments bounds the objects one file may hold.
const MaxDocuments = 1000

// Objects are the decoded objects of one file, in file order per kind.
type Objects struct {
	Pods            []*v1.Pod
	DaemonSets      []*appsv1.DaemonSet
	Deployments     []*appsv1.Deployment
	StatefulSets    []*appsv1.StatefulSet
	PriorityClasses []*schedulingv1.PriorityClass
	PDBs            []*policyv1.PodDisruptionBudget
	// ConfigMaps and Secrets are as the API server stores them: a
	// Secret's stringData merged into its data (objects.SetSecretDefaults).
	ConfigMaps []*v1.ConfigMap
	Secrets    []*v1.Secret

	file      string
	documents map[string]int // by ID
}

// ID names an object as Decode knows it: "Deployment default/web",
// "Pod default/p", "PriorityClass high".
func ID(kind, namespace, name string) string {
	if kind == "PriorityClass" {
		return kind + " " + name
	}
	return kind + " " + namespace + "/" + name
}

// Where is "file: document N: ID", for errors about a decoded object
// found after decoding (an apply that conflicts with what is stored).
func (o *Objects) Where(kind, namespace, name string) string {
	id := ID(kind, namespace, name)
	if n, ok := o.documents[id]; ok {
		return fmt.Sprintf("%s: document %d: %s", o.file, n, id)
	}
	return cmp.Or(o.file, "<request>") + ": " + id
}

// Len is the number of objects.
func (o *Objects) Len() int {
	return len(o.Pods) + len(o.DaemonSets) + len(o.Deployments) + len(o.StatefulSets) + len(o.PriorityClasses) + len(o.PDBs) +
		len(o.ConfigMaps) + len(o.Secrets)
}

// Decode decodes every document of file's data. Any bad document fails
// the whole file, so that an apply is all or nothing.
func Decode(file string, data []byte) (*Objects, error) {
	if len(data) > manifest.MaxFileSize {
		return nil, fmt.Errorf("%s: file is %d bytes, larger than the %d byte limit", file, len(data), manifest.MaxFileSize)
	}
	docs, err := manifest.SplitDocuments(data, MaxDocuments)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: no objects", file)
	}
	if len(docs) > MaxDocuments {
		return nil, fmt.Errorf("%s: %d documents, more than the %d allowed", file, len(docs), MaxDocuments)
	}
	out := &Objects{file: file}
	seen := map[string]int{}
	out.documents = seen
	for i, doc := range docs {
		where := fmt.Sprintf("%s: document %d", file, i+1)
		id, err := out.decode(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if prev, dup := seen[id]; dup {
			return nil, fmt.Errorf("%s: %s: also in document %d", where, id, prev)
		}
		seen[id] = i + 1
	}
	return out, nil
}

// decode decodes one document into its kind's list and returns its
// identity ("Deployment default/web").
func (o *Objects) decode(doc []byte) (string, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return "", fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &head); err != nil {
		return "", fmt.Errorf("not a Kubernetes object: %w", err)
	}
	ns := head.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	named := fmt.Sprintf("%s %q", head.Kind, head.Metadata.Name)
	id := ID(head.Kind, ns, head.Metadata.Name)
	// YAML spells a NUL many ways (\0, \x00, \u0000), its JSON only one.
	// The hub's store (PostgreSQL) cannot keep a NUL in any string.
	if protocol.FindNUL(js) >= 0 {
		return "", fmt.Errorf("%s: a string holds a NUL character (\\u0000): no field may hold one", named)
	}
	switch gvk := head.APIVersion + ", " + head.Kind; gvk {
	case "v1, Pod":
		pods, err := manifest.Decode(doc)
		if err != nil {
			return "", err
		}
		p := pods[0]
		errs := validateScheduling(&p.Spec, specPath)
		errs = append(errs, validateBareOwners(p.OwnerReferences)...)
		if len(errs) > 0 {
			return "", fmt.Errorf("pod %q: %w", p.Name, errs.ToAggregate())
		}
		o.Pods = append(o.Pods, p)
	case "apps/v1, DaemonSet":
		ds, err := decodeValid(js, named, setDaemonSetDefaults, validateDaemonSet)
		if err != nil {
			return "", err
		}
		o.DaemonSets = append(o.DaemonSets, ds)
	case "apps/v1, Deployment":
		d, err := decodeValid(js, named, setDeploymentDefaults, validateDeployment)
		if err != nil {
			return "", err
		}
		o.Deployments = append(o.Deployments, d)
	case "apps/v1, StatefulSet":
		st, err := decodeValid(js, named, setStatefulSetDefaults, validateStatefulSet)
		if err != nil {
			return "", err
		}
		o.StatefulSets = append(o.StatefulSets, st)
	case "scheduling.k8s.io/v1, PriorityClass":
		pc, err := decodeValid(js, named, setPriorityClassDefaults, validatePriorityClass)
		if err != nil {
			return "", err
		}
		o.PriorityClasses = append(o.PriorityClasses, pc)
	case "policy/v1, PodDisruptionBudget":
		pdb, err := decodeValid(js, named, setPDBDefaults, validatePDB)
		if err != nil {
			return "", err
		}
		pdb.Status = policyv1.PodDisruptionBudgetStatus{} // the disruption controller's
		o.PDBs = append(o.PDBs, pdb)
	case "v1, ConfigMap":
		cm, err := decodeValid(js, named, setConfigMapDefaults, objects.ValidateConfigMap)
		if err != nil {
			return "", err
		}
		o.ConfigMaps = append(o.ConfigMaps, cm)
	case "v1, Secret":
		// Validated with stringData merged; errors never show a value.
		sec, err := decodeValid(js, named, setSecretDefaults, objects.ValidateSecret)
		if err != nil {
			return "", err
		}
		o.Secrets = append(o.Secrets, sec)
	default:
		return "", fmt.Errorf("apiVersion %q kind %q: podhub applies apiVersion v1 kind Pod, ConfigMap and Secret, apps/v1 DaemonSet, Deployment and StatefulSet, scheduling.k8s.io/v1 PriorityClass, policy/v1 PodDisruptionBudget",
			head.APIVersion, head.Kind)
	}
	return id, nil
}

// decodeValid decodes an object strictly, gives it its defaults and
// validates it; errors name the object.
func decodeValid[T any](js []byte, named string, setDefaults func(*T), validate func(*T) field.ErrorList) (*T, error) {
	obj := new(T)
	if err := strictInto(js, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", named, err)
	}
	setDefaults(obj)
	if errs := validate(obj); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", named, errs.ToAggregate())
	}
	return obj, nil
}

// strictInto decodes JSON into v, failing on unknown or duplicate fields,
// wrong types and unparsable quantities, each named by its path.
func strictInto(js []byte, v any) error {
	if err := checkQuantities(js); err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, v)
	if err != nil {
		return errors.New(describeJSONError(err))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

// describeJSONError rewrites "cannot unmarshal X into Go struct field
// T.a.b of type Y" as "a.b: expected Y, got X".
func describeJSONError(err error) string {
	msg := err.Error()
	i := strings.Index(msg, "cannot unmarshal ")
	j := strings.Index(msg, " into Go struct field ")
	k := strings.LastIndex(msg, " of type ")
	if i < 0 || j < i || k < j {
		return msg
	}
	got := msg[i+len("cannot unmarshal ") : j]
	path := msg[j+len(" into Go struct field ") : k]
	var parts []string
	for n, seg := range strings.Split(path, ".") {
		if n == 0 || seg == "" || (seg[0] >= 'A' && seg[0] <= 'Z') {
			continue
		}
		parts = append(parts, seg)
	}
	return fmt.Sprintf("%s: expected %s, got %s", strings.Join(parts, "."), msg[k+len(" of type "):], got)
}

// validateBareOwners refuses a controller owner reference on a pod
// applied by itself: the hub's controllers know their pods by the
// owner's name, so such a pod would be counted as a Deployment's replica
// or deleted as an orphan (a pod copied from `kubectl get -o yaml`).
func validateBareOwners(refs []metav1.OwnerReference) field.ErrorList {
	var errs field.ErrorList
	for i, ref := range refs {
		if ref.Controller != nil && *ref.Controller {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "ownerReferences").Index(i),
				"a pod applied by itself has no controller: the hub's Deployments and DaemonSets make their own pods"))
		}
	}
	return errs
}

func setConfigMapDefaults(cm *v1.ConfigMap) {
	if cm.Namespace == "" {
		cm.Namespace = "default"
	}
	objects.SetConfigMapDefaults(cm)
}

func setSecretDefaults(s *v1.Secret) {
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	objects.SetSecretDefaults(s)
}
