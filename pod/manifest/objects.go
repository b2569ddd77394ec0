package manifest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
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
// and validates it as the API server does; the error names the object and
// the field.
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
	var o *objects.Object
	var errs field.ErrorList
	if into == &cm {
		if cm.Namespace == "" {
			cm.Namespace = "default"
		}
		errs = validateConfigMap(&cm)
		o = fromConfigMap(&cm)
	} else {
		if s.Namespace == "" {
			s.Namespace = "default"
		}
		secretStringData(&s)
		errs = validateSecret(&s)
		o = fromSecret(&s)
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

// secretStringData merges stringData into data, as the API server does
// on write (stringData wins).
func secretStringData(s *v1.Secret) {
	if len(s.StringData) == 0 {
		return
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

// validateMeta checks an object's name and namespace.
func validateMeta(name, namespace string) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if name == "" {
		errs = append(errs, field.Required(meta.Child("name"), "name or generateName is required"))
	}
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		if name != "" {
			errs = append(errs, field.Invalid(meta.Child("name"), name, msg))
		}
	}
	for _, msg := range validation.IsDNS1123Label(namespace) {
		errs = append(errs, field.Invalid(meta.Child("namespace"), namespace, msg))
	}
	return errs
}

// validateConfigMap is the API server's ValidateConfigMap for the fields
// a device reads.
func validateConfigMap(cm *v1.ConfigMap) field.ErrorList {
	errs := validateMeta(cm.Name, cm.Namespace)
	total := 0
	for _, key := range sortedKeys(cm.Data) {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, msg))
		}
		if _, dup := cm.BinaryData[key]; dup {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, "duplicate of key present in binaryData"))
		}
		total += len(cm.Data[key])
	}
	for _, key := range sortedKeys(cm.BinaryData) {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(key), key, msg))
		}
		if _, dup := cm.Data[key]; dup {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(key), key, "duplicate of key present in data"))
		}
		total += len(cm.BinaryData[key])
	}
	if total > v1.MaxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath(""), "", v1.MaxSecretSize))
	}
	return errs
}

// validateSecret is the API server's ValidateSecret for the fields a
// device reads.
func validateSecret(s *v1.Secret) field.ErrorList {
	errs := validateMeta(s.Name, s.Namespace)
	data := field.NewPath("data")
	total := 0
	for _, key := range sortedKeys(s.Data) {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(data.Key(key), key, msg))
		}
		total += len(s.Data[key])
	}
	if total > v1.MaxSecretSize {
		errs = append(errs, field.TooLong(data, "", v1.MaxSecretSize))
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func fromConfigMap(cm *v1.ConfigMap) *objects.Object {
	o := &objects.Object{Ref: objects.Ref{Kind: objects.ConfigMap, Namespace: cm.Namespace, Name: cm.Name},
		Immutable: cm.Immutable != nil && *cm.Immutable, Data: map[string][]byte{}}
	for k, v := range cm.Data {
		o.Data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		o.Data[k] = v
	}
	return o
}

func fromSecret(s *v1.Secret) *objects.Object {
	t := s.Type
	if t == "" {
		t = v1.SecretTypeOpaque
	}
	o := &objects.Object{Ref: objects.Ref{Kind: objects.Secret, Namespace: s.Namespace, Name: s.Name},
		Immutable: s.Immutable != nil && *s.Immutable, Type: t, Data: map[string][]byte{}}
	for k, v := range s.Data {
		o.Data[k] = v
	}
	return o
}

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
