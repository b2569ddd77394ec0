package objects

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxSize is the most bytes an object's values may have in all
// (core.MaxSecretSize, the limit of ConfigMaps too).
const MaxSize = 1 << 20

// redacted stands for a Secret's value in an error, as the API server
// writes it.
const redacted = "<secret contents redacted>"

// The checks below are the API server's (k8s.io/kubernetes
// pkg/apis/core/validation: ValidateConfigMap, ValidateSecret and their
// Update forms), on the v1 types: a Secret's stringData counts as merged
// into its data, as the API server's conversion merges it before it
// validates. No error carries a Secret's value: only keys, and for a
// value that is no JSON, "<secret contents redacted>".

// ValidateConfigMap checks a ConfigMap as the API server does on create.
func ValidateConfigMap(cm *v1.ConfigMap) field.ErrorList {
	errs := validateMeta(&cm.ObjectMeta)
	dataPath, binaryPath := field.NewPath("data"), field.NewPath("binaryData")
	total := 0
	for _, key := range sortedKeys(cm.Data) {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(dataPath.Key(key), key, msg))
		}
		if _, dup := cm.BinaryData[key]; dup {
			errs = append(errs, field.Invalid(dataPath.Key(key), key, "duplicate of key present in binaryData"))
		}
		total += len(cm.Data[key])
	}
	for _, key := range sortedKeys(cm.BinaryData) {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(binaryPath.Key(key), key, msg))
		}
		total += len(cm.BinaryData[key])
	}
	if total > MaxSize {
		// The API server's path "" is the whole object.
		errs = append(errs, field.TooLong(field.NewPath(""), "", MaxSize))
	}
	return errs
}

// ValidateConfigMapUpdate checks a ConfigMap replacing old: an immutable
// one keeps its data and binaryData, and stays immutable. The caller
// gives cm the server's metadata of old (uid, resourceVersion,
// creationTimestamp) first, as an apply's merge does.
func ValidateConfigMapUpdate(cm, old *v1.ConfigMap) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&cm.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	if isTrue(old.Immutable) {
		if !isTrue(cm.Immutable) {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !reflect.DeepEqual(orNil(cm.Data), orNil(old.Data)) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
		if !reflect.DeepEqual(orNil(cm.BinaryData), orNil(old.BinaryData)) {
			errs = append(errs, field.Forbidden(field.NewPath("binaryData"), "field is immutable when `immutable` is set"))
		}
	}
	return append(errs, ValidateConfigMap(cm)...)
}

// ValidateSecret checks a Secret as the API server does on create: its
// keys, its size, and what its type requires.
func ValidateSecret(s *v1.Secret) field.ErrorList {
	errs := validateMeta(&s.ObjectMeta)
	data := SecretData(s)
	dataPath := field.NewPath("data")
	total := 0
	for _, key := range sortedKeys(data) {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(dataPath.Key(key), key, msg))
		}
		total += len(data[key])
	}
	if total > MaxSize {
		errs = append(errs, field.TooLong(dataPath, "", MaxSize))
	}
	switch s.Type {
	case v1.SecretTypeServiceAccountToken:
		// The token controller fills in the rest.
		if s.Annotations[v1.ServiceAccountNameKey] == "" {
			errs = append(errs, field.Required(field.NewPath("metadata", "annotations").Key(v1.ServiceAccountNameKey), ""))
		}
	case v1.SecretTypeOpaque, "":
	case v1.SecretTypeDockercfg:
		errs = append(errs, validateJSONKey(data, dataPath, v1.DockerConfigKey)...)
	case v1.SecretTypeDockerConfigJson:
		errs = append(errs, validateJSONKey(data, dataPath, v1.DockerConfigJsonKey)...)
	case v1.SecretTypeBasicAuth:
		// Either may be empty, but one must be there.
		_, user := data[v1.BasicAuthUsernameKey]
		_, password := data[v1.BasicAuthPasswordKey]
		if !user && !password {
			errs = append(errs, field.Required(dataPath.Key(v1.BasicAuthUsernameKey), ""),
				field.Required(dataPath.Key(v1.BasicAuthPasswordKey), ""))
		}
	case v1.SecretTypeSSHAuth:
		if len(data[v1.SSHAuthPrivateKey]) == 0 {
			errs = append(errs, field.Required(dataPath.Key(v1.SSHAuthPrivateKey), ""))
		}
	case v1.SecretTypeTLS:
		if _, ok := data[v1.TLSCertKey]; !ok {
			errs = append(errs, field.Required(dataPath.Key(v1.TLSCertKey), ""))
		}
		if _, ok := data[v1.TLSPrivateKeyKey]; !ok {
			errs = append(errs, field.Required(dataPath.Key(v1.TLSPrivateKeyKey), ""))
		}
	default:
		// Any other type (bootstrap.kubernetes.io/token among them: its
		// keys are checked where a token is used, not here) is accepted
		// as it is.
	}
	return errs
}

// ValidateSecretUpdate checks a Secret replacing old: its type may not
// change, and an immutable one keeps its data and stays immutable. The
// caller gives s the server's metadata of old first.
func ValidateSecretUpdate(s, old *v1.Secret) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&s.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, validateImmutableType(s.Type, old.Type)...)
	if isTrue(old.Immutable) {
		if !isTrue(s.Immutable) {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !reflect.DeepEqual(orNil(SecretData(s)), orNil(SecretData(old))) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
	}
	return append(errs, ValidateSecret(s)...)
}

// SecretData is a Secret's data with its stringData merged in, a
// stringData value winning (the API server's conversion). s is not
// changed; without stringData its own map is returned.
func SecretData(s *v1.Secret) map[string][]byte {
	if len(s.StringData) == 0 {
		return s.Data
	}
	out := make(map[string][]byte, len(s.Data)+len(s.StringData))
	maps.Copy(out, s.Data)
	for k, v := range s.StringData {
		out[k] = []byte(v)
	}
	return out
}

// SetSecretDefaults makes a Secret what the API server stores: stringData
// merged into data and dropped (it is write-only), type Opaque when
// unset, empty maps as none.
func SetSecretDefaults(s *v1.Secret) {
	s.Data, s.StringData = orNil(SecretData(s)), nil
	if s.Type == "" {
		s.Type = v1.SecretTypeOpaque
	}
}

// SetConfigMapDefaults stores empty maps as none, as a stored object
// reads back, so that an update's comparison does not tell them apart.
func SetConfigMapDefaults(cm *v1.ConfigMap) {
	cm.Data, cm.BinaryData = orNil(cm.Data), orNil(cm.BinaryData)
}

// validateMeta is the API server's ValidateObjectMeta for a namespaced
// object named as a DNS subdomain, with its check of finalizer names.
func validateMeta(m *metav1.ObjectMeta) field.ErrorList {
	path := field.NewPath("metadata")
	errs := apivalidation.ValidateObjectMeta(m, true, apivalidation.NameIsDNSSubdomain, path)
	for i, f := range m.Finalizers {
		if !strings.Contains(f, "/") && !standardFinalizers[f] {
			errs = append(errs, field.Invalid(path.Child("finalizers").Index(i), f, "name is neither a standard finalizer name nor is it fully qualified"))
		}
	}
	return errs
}

var standardFinalizers = map[string]bool{
	string(v1.FinalizerKubernetes):   true,
	metav1.FinalizerOrphanDependents: true,
	metav1.FinalizerDeleteDependents: true,
}

// validateJSONKey requires a key whose value is a JSON object (a docker
// config); the error names the key, never the value.
func validateJSONKey(data map[string][]byte, dataPath *field.Path, key string) field.ErrorList {
	raw, ok := data[key]
	if !ok {
		return field.ErrorList{field.Required(dataPath.Key(key), "")}
	}
	if err := json.Unmarshal(raw, &map[string]any{}); err != nil {
		return field.ErrorList{field.Invalid(dataPath.Key(key), redacted, err.Error())}
	}
	return nil
}

func validateImmutableType(t, old v1.SecretType) field.ErrorList {
	return apivalidation.ValidateImmutableField(t, old, field.NewPath("type"))
}

func isTrue(b *bool) bool { return b != nil && *b }

// orNil is m, or nil when empty.
func orNil[V any](m map[string]V) map[string]V {
	if len(m) == 0 {
		return nil
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
