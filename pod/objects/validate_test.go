package objects

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// marker is a secret value no error may ever show.
const marker = "s3cr3t-MARKER-value"

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "default"}
}

func errStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func checkErrs(t *testing.T, name string, errs field.ErrorList, want []string) {
	t.Helper()
	got := errStrings(errs)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot  %q\nwant %q", name, got, want)
	}
	for _, g := range got {
		if strings.Contains(g, marker) {
			t.Errorf("%s: an error shows a secret value: %s", name, g)
		}
	}
}

const keyMsg = `a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')`

func TestValidateConfigMapAsTheAPIServer(t *testing.T) {
	yes := true
	for _, c := range []struct {
		name string
		cm   v1.ConfigMap
		want []string
	}{
		{"valid", v1.ConfigMap{ObjectMeta: meta("app"), Data: map[string]string{"a.conf": "x", "B_2-c": "y"},
			BinaryData: map[string][]byte{"bin": {0, 1}}, Immutable: &yes}, nil},
		{"no name", v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default"}},
			[]string{`metadata.name: Required value: name or generateName is required`}},
		{"no namespace", v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"}},
			[]string{`metadata.namespace: Required value`}},
		{"bad name", v1.ConfigMap{ObjectMeta: meta("App_1")},
			[]string{`metadata.name: Invalid value: "App_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"bad keys", v1.ConfigMap{ObjectMeta: meta("app"), Data: map[string]string{"a b": "x", "..": "y"},
			BinaryData: map[string][]byte{"c/d": nil}},
			[]string{`data[..]: Invalid value: "..": must not be '..'`,
				`data[a b]: Invalid value: "a b": ` + keyMsg,
				`binaryData[c/d]: Invalid value: "c/d": ` + keyMsg}},
		{"key too long", v1.ConfigMap{ObjectMeta: meta("app"), Data: map[string]string{strings.Repeat("k", 254): ""}},
			[]string{`data[` + strings.Repeat("k", 254) + `]: Invalid value: "` + strings.Repeat("k", 254) + `": must be no more than 253 characters`}},
		{"overlap", v1.ConfigMap{ObjectMeta: meta("app"), Data: map[string]string{"k": "x"}, BinaryData: map[string][]byte{"k": {1}}},
			[]string{`data[k]: Invalid value: "k": duplicate of key present in binaryData`}},
		{"at the limit", v1.ConfigMap{ObjectMeta: meta("app"), Data: map[string]string{"a": strings.Repeat("x", MaxSize/2)},
			BinaryData: map[string][]byte{"b": make([]byte, MaxSize/2)}}, nil},
		{"too big", v1.ConfigMap{ObjectMeta: meta("app"), Data: map[string]string{"a": strings.Repeat("x", MaxSize/2)},
			BinaryData: map[string][]byte{"b": make([]byte, MaxSize/2+1)}},
			[]string{`[]: Too long: may not be more than 1048576 bytes`}},
	} {
		checkErrs(t, c.name, ValidateConfigMap(&c.cm), c.want)
	}
}

func TestValidateSecretAsTheAPIServer(t *testing.T) {
	v := []byte(marker)
	for _, c := range []struct {
		name string
		s    v1.Secret
		want []string
	}{
		{"opaque", v1.Secret{ObjectMeta: meta("db"), Type: v1.SecretTypeOpaque, Data: map[string][]byte{"password": v}}, nil},
		{"no type", v1.Secret{ObjectMeta: meta("db"), Data: map[string][]byte{"password": v}}, nil},
		{"other type", v1.Secret{ObjectMeta: meta("db"), Type: "example.com/thing"}, nil},
		{"bootstrap token", v1.Secret{ObjectMeta: meta("bootstrap-token-abcdef"), Type: v1.SecretTypeBootstrapToken}, nil},
		{"bad key", v1.Secret{ObjectMeta: meta("db"), Data: map[string][]byte{"a:b": v}},
			[]string{`data[a:b]: Invalid value: "a:b": ` + keyMsg}},
		{"bad stringData key", v1.Secret{ObjectMeta: meta("db"), StringData: map[string]string{"a b": marker}},
			[]string{`data[a b]: Invalid value: "a b": ` + keyMsg}},
		{"too big", v1.Secret{ObjectMeta: meta("db"), Data: map[string][]byte{"a": make([]byte, MaxSize)},
			StringData: map[string]string{"b": "x"}},
			[]string{`data: Too long: may not be more than 1048576 bytes`}},
		{"stringData replaces data", v1.Secret{ObjectMeta: meta("db"), Data: map[string][]byte{"a": make([]byte, MaxSize)},
			StringData: map[string]string{"a": "x"}}, nil},
		{"service account token", v1.Secret{ObjectMeta: meta("tok"), Type: v1.SecretTypeServiceAccountToken},
			[]string{`metadata.annotations[kubernetes.io/service-account.name]: Required value`}},
		{"service account token named", v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tok", Namespace: "default",
			Annotations: map[string]string{v1.ServiceAccountNameKey: "sa"}}, Type: v1.SecretTypeServiceAccountToken}, nil},
		{"dockercfg missing", v1.Secret{ObjectMeta: meta("reg"), Type: v1.SecretTypeDockercfg},
			[]string{`data[.dockercfg]: Required value`}},
		{"dockercfg not JSON", v1.Secret{ObjectMeta: meta("reg"), Type: v1.SecretTypeDockercfg, Data: map[string][]byte{".dockercfg": v}},
			[]string{`data[.dockercfg]: Invalid value: "<secret contents redacted>": invalid character 's' looking for beginning of value`}},
		{"dockercfg", v1.Secret{ObjectMeta: meta("reg"), Type: v1.SecretTypeDockercfg, Data: map[string][]byte{".dockercfg": []byte(`{"r": {}}`)}}, nil},
		{"dockerconfigjson missing", v1.Secret{ObjectMeta: meta("reg"), Type: v1.SecretTypeDockerConfigJson},
			[]string{`data[.dockerconfigjson]: Required value`}},
		{"dockerconfigjson not an object", v1.Secret{ObjectMeta: meta("reg"), Type: v1.SecretTypeDockerConfigJson,
			StringData: map[string]string{".dockerconfigjson": `["` + marker + `"]`}},
			[]string{`data[.dockerconfigjson]: Invalid value: "<secret contents redacted>": json: cannot unmarshal array into Go value of type map[string]interface {}`}},
		{"dockerconfigjson", v1.Secret{ObjectMeta: meta("reg"), Type: v1.SecretTypeDockerConfigJson,
			StringData: map[string]string{".dockerconfigjson": `{"auths": {}}`}}, nil},
		{"basic-auth empty", v1.Secret{ObjectMeta: meta("ba"), Type: v1.SecretTypeBasicAuth},
			[]string{`data[username]: Required value`, `data[password]: Required value`}},
		{"basic-auth password only", v1.Secret{ObjectMeta: meta("ba"), Type: v1.SecretTypeBasicAuth, Data: map[string][]byte{"password": nil}}, nil},
		{"ssh-auth empty key", v1.Secret{ObjectMeta: meta("ssh"), Type: v1.SecretTypeSSHAuth, Data: map[string][]byte{"ssh-privatekey": {}}},
			[]string{`data[ssh-privatekey]: Required value`}},
		{"ssh-auth", v1.Secret{ObjectMeta: meta("ssh"), Type: v1.SecretTypeSSHAuth, Data: map[string][]byte{"ssh-privatekey": v}}, nil},
		{"tls empty", v1.Secret{ObjectMeta: meta("tls"), Type: v1.SecretTypeTLS},
			[]string{`data[tls.crt]: Required value`, `data[tls.key]: Required value`}},
		{"tls key only", v1.Secret{ObjectMeta: meta("tls"), Type: v1.SecretTypeTLS, Data: map[string][]byte{"tls.key": v}},
			[]string{`data[tls.crt]: Required value`}},
		{"tls", v1.Secret{ObjectMeta: meta("tls"), Type: v1.SecretTypeTLS, Data: map[string][]byte{"tls.key": v, "tls.crt": nil}}, nil},
		{"bad finalizer", v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", Finalizers: []string{"mine"}}},
			[]string{`metadata.finalizers[0]: Invalid value: "mine": name is neither a standard finalizer name nor is it fully qualified`}},
	} {
		checkErrs(t, c.name, ValidateSecret(&c.s), c.want)
	}
}

func TestUpdatesOfImmutableObjects(t *testing.T) {
	yes, no := true, false
	server := metav1.ObjectMeta{Name: "app", Namespace: "default", UID: "u1", ResourceVersion: "7"}
	oldCM := &v1.ConfigMap{ObjectMeta: server, Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {1}}, Immutable: &yes}
	for _, c := range []struct {
		name string
		cm   v1.ConfigMap
		want []string
	}{
		{"labels may change", v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{"x": "y"}}, Data: oldCM.Data, BinaryData: oldCM.BinaryData, Immutable: &yes}, nil},
		{"data", v1.ConfigMap{ObjectMeta: server, Data: map[string]string{"a": "2"}, BinaryData: oldCM.BinaryData, Immutable: &yes},
			[]string{"data: Forbidden: field is immutable when `immutable` is set"}},
		{"binaryData", v1.ConfigMap{ObjectMeta: server, Data: oldCM.Data, Immutable: &yes},
			[]string{"binaryData: Forbidden: field is immutable when `immutable` is set"}},
		{"unset", v1.ConfigMap{ObjectMeta: server, Data: oldCM.Data, BinaryData: oldCM.BinaryData},
			[]string{"immutable: Forbidden: field is immutable when `immutable` is set"}},
		{"false", v1.ConfigMap{ObjectMeta: server, Data: oldCM.Data, BinaryData: oldCM.BinaryData, Immutable: &no},
			[]string{"immutable: Forbidden: field is immutable when `immutable` is set"}},
	} {
		checkErrs(t, "configmap "+c.name, ValidateConfigMapUpdate(&c.cm, oldCM), c.want)
	}
	// A mutable one may change and become immutable.
	mutable := &v1.ConfigMap{ObjectMeta: server, Data: map[string]string{"a": "1"}}
	checkErrs(t, "mutable", ValidateConfigMapUpdate(&v1.ConfigMap{ObjectMeta: server, Data: map[string]string{"a": "2"}, Immutable: &yes}, mutable), nil)

	oldS := &v1.Secret{ObjectMeta: server, Type: v1.SecretTypeOpaque, Data: map[string][]byte{"a": []byte(marker)}, Immutable: &yes}
	for _, c := range []struct {
		name string
		s    v1.Secret
		want []string
	}{
		{"same, as stringData", v1.Secret{ObjectMeta: server, Type: v1.SecretTypeOpaque, StringData: map[string]string{"a": marker}, Immutable: &yes}, nil},
		{"data", v1.Secret{ObjectMeta: server, Type: v1.SecretTypeOpaque, Data: map[string][]byte{"a": []byte(marker + "2")}, Immutable: &yes},
			[]string{"data: Forbidden: field is immutable when `immutable` is set"}},
		{"unset", v1.Secret{ObjectMeta: server, Type: v1.SecretTypeOpaque, Data: oldS.Data},
			[]string{"immutable: Forbidden: field is immutable when `immutable` is set"}},
		{"type", v1.Secret{ObjectMeta: server, Type: "example.com/x", Data: oldS.Data, Immutable: &yes},
			[]string{`type: Invalid value: "example.com/x": field is immutable`}},
	} {
		checkErrs(t, "secret "+c.name, ValidateSecretUpdate(&c.s, oldS), c.want)
	}
	// The type of a mutable Secret is immutable too; its data is not.
	mutableS := &v1.Secret{ObjectMeta: server, Type: v1.SecretTypeOpaque, Data: map[string][]byte{"a": []byte(marker)}}
	checkErrs(t, "mutable secret type", ValidateSecretUpdate(&v1.Secret{ObjectMeta: server, Type: v1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": nil, "tls.key": nil}}, mutableS), []string{`type: Invalid value: "kubernetes.io/tls": field is immutable`})
	checkErrs(t, "mutable secret data", ValidateSecretUpdate(&v1.Secret{ObjectMeta: server, Type: v1.SecretTypeOpaque}, mutableS), nil)
	// The server's metadata is kept by the caller; a changed uid is refused.
	other := server
	other.UID = "u2"
	checkErrs(t, "uid", ValidateSecretUpdate(&v1.Secret{ObjectMeta: other, Type: v1.SecretTypeOpaque}, mutableS),
		[]string{`metadata.uid: Invalid value: "u2": field is immutable`})
}

func TestFromObjectsAndDefaults(t *testing.T) {
	yes := true
	cm := FromConfigMap(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns", UID: "u", ResourceVersion: "3"},
		Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {2}}, Immutable: &yes})
	if cm.Ref != (Ref{ConfigMap, "ns", "app"}) || cm.UID != "u" || cm.ResourceVersion != "3" || !cm.Immutable ||
		string(cm.Data["a"]) != "1" || cm.Data["b"][0] != 2 || len(cm.Data) != 2 {
		t.Errorf("FromConfigMap: %+v", cm)
	}
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}, Data: map[string][]byte{"a": []byte("1"), "b": []byte("2")},
		StringData: map[string]string{"b": "3"}}
	o := FromSecret(s)
	if o.Ref != (Ref{Secret, "ns", "db"}) || o.Type != v1.SecretTypeOpaque || string(o.Data["a"]) != "1" || string(o.Data["b"]) != "3" {
		t.Errorf("FromSecret: %+v", o)
	}
	if string(s.Data["b"]) != "2" {
		t.Error("FromSecret changed its Secret")
	}
	SetSecretDefaults(s)
	if s.StringData != nil || string(s.Data["b"]) != "3" || s.Type != v1.SecretTypeOpaque {
		t.Errorf("SetSecretDefaults: %+v", s)
	}
	empty := &v1.Secret{Data: map[string][]byte{}}
	SetSecretDefaults(empty)
	if empty.Data != nil {
		t.Errorf("an empty data map is kept: %#v", empty.Data)
	}
}
