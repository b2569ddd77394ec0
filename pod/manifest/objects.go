package manifest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"

	"github.com/podvisor/podvisor/pod/objects"
)

// ObjectError is an object document of a manifest file that was refused:
// the file's other documents stand. Ref is the object it names, when its
// head could be read (zero otherwise).
type ObjectError struct {
	Ref objects.Ref
	Err error
}

// isObjectKind reports whether a document's head names a kind a manifest
// file may give its static pods: a v1 ConfigMap or Secret.
func isObjectKind(apiVersion, kind string) bool {
	return apiVersion == "v1" && (kind == string(objects.ConfigMap) || kind == string(objects.Secret))
}

// decodeObject decodes a ConfigMap or Secret document (as JSON) strictly
// and validates it as the API server does (objects.ValidateConfigMap,
// ValidateSecret); the error names the object and the field. Its UID and
// resourceVersion are the file's (localIdentity), whatever it says.
func decodeObject(kind, name string, js []byte) (*objects.Object, error) {
	named := fmt.Sprintf("%s %q: ", strings.ToLower(kind), name)
	if kind == string(objects.Secret) {
		if err := checkSecretData(js); err != nil {
			return nil, fmt.Errorf("%s%w", named, err)
		}
	}
	var into any
	var cm v1.ConfigMap
	var s v1.Secret
	if kind == string(objects.ConfigMap) {
		into = &cm
	} else {
		into = &s
	}
	strict, err := kjson.UnmarshalStrict(js, into)
	if err != nil {
		return nil, fmt.Errorf("%s%s", named, describeJSONError(err))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%s%s", named, strings.Join(msgs, "; "))
	}
	// The namespace defaults as kubectl's does for a file without one;
	// then the API server's checks.
	var o *objects.Object
	var errs field.ErrorList
	if into == &cm {
		if cm.Namespace == "" {
			cm.Namespace = "default"
		}
		errs = objects.ValidateConfigMap(&cm)
		o = objects.FromConfigMap(&cm)
	} else {
		if s.Namespace == "" {
			s.Namespace = "default"
		}
		errs = objects.ValidateSecret(&s)
		o = objects.FromSecret(&s)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s%w", named, errs.ToAggregate())
	}
	o.UID, o.ResourceVersion = localIdentity(o)
	return o, nil
}

// checkSecretData says which data value of a Secret is not base64, by
// its key and never with its value (the decoder's own error names
// neither).
func checkSecretData(js []byte) error {
	var raw struct {
		Data map[string]any `json:"data"`
	}
	if kjson.UnmarshalCaseSensitivePreserveInts(js, &raw) != nil {
		return nil // the typed decode says what is wrong
	}
	var errs field.ErrorList
	for _, k := range sortedKeys(raw.Data) {
		s, ok := raw.Data[k].(string)
		if !ok {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), field.OmitValueType{}, "expected a base64-encoded string"))
			continue
		}
		if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), field.OmitValueType{}, err.Error()))
		}
	}
	return errs.ToAggregate()
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// localIdentity is a file object's UID, which its name alone gives (it
// stays across edits, as an object's UID does across updates), and its
// resourceVersion, which its content gives.
func localIdentity(o *objects.Object) (uid, rv string) {
	h := sha256.Sum256([]byte(SourceFile + "\x00" + o.Ref.String()))
	uid = fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
	c := sha256.New()
	fmt.Fprintf(c, "%s\x00%t\x00", o.Type, o.Immutable)
	for _, k := range o.Keys() {
		fmt.Fprintf(c, "%d:%s%d:", len(k), k, len(o.Data[k]))
		c.Write(o.Data[k])
	}
	return uid, hex.EncodeToString(c.Sum(nil)[:8])
}
