package kinds

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

const objectsFile = `apiVersion: v1
kind: ConfigMap
metadata: {name: app}
data: {app.conf: "x=1"}
binaryData: {logo: AAEC}
---
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: shop}
data: {user: YWRtaW4=}
stringData: {password: MARKER-pw, user: root}
`

func TestDecodeConfigMapsAndSecrets(t *testing.T) {
	objs, err := Decode("f.yaml", []byte(objectsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.ConfigMaps) != 1 || len(objs.Secrets) != 1 || objs.Len() != 2 {
		t.Fatalf("decoded %+v", objs)
	}
	cm := objs.ConfigMaps[0]
	if cm.Namespace != "default" || cm.Data["app.conf"] != "x=1" || string(cm.BinaryData["logo"]) != "\x00\x01\x02" {
		t.Errorf("configmap %+v", cm)
	}
	s := objs.Secrets[0]
	// stringData merged into data, winning, as the API server does.
	if s.Namespace != "shop" || s.Type != v1.SecretTypeOpaque || s.StringData != nil ||
		string(s.Data["user"]) != "root" || string(s.Data["password"]) != "MARKER-pw" {
		t.Errorf("secret %+v", s)
	}
	if got := objs.Where("Secret", "shop", "db"); got != "f.yaml: document 2: Secret shop/db" {
		t.Errorf("Where: %s", got)
	}
}

func TestDecodeRefusesBadObjectsWithoutTheirValues(t *testing.T) {
	for _, c := range []struct{ name, file, want string }{
		{"overlap", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\nbinaryData: {k: AA==}\n",
			`f.yaml: document 1: ConfigMap "a": data[k]: Invalid value: "k": duplicate of key present in binaryData`},
		{"configmap unknown field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndatas: {k: v}\n",
			`f.yaml: document 1: ConfigMap "a": unknown field "datas"`},
		{"tls without a key", "apiVersion: v1\nkind: Secret\nmetadata: {name: t}\ntype: kubernetes.io/tls\nstringData: {tls.crt: MARKER}\n",
			`f.yaml: document 1: Secret "t": data[tls.key]: Required value`},
		{"bad JSON", "apiVersion: v1\nkind: Secret\nmetadata: {name: r}\ntype: kubernetes.io/dockerconfigjson\nstringData: {.dockerconfigjson: MARKER}\n",
			`f.yaml: document 1: Secret "r": data[.dockerconfigjson]: Invalid value: "<secret contents redacted>": invalid character 'M' looking for beginning of value`},
		{"bad base64", "apiVersion: v1\nkind: Secret\nmetadata: {name: b}\ndata: {k: \"MARKER!!\"}\n", `f.yaml: document 1: Secret "b": `},
		{"bad key", "apiVersion: v1\nkind: Secret\nmetadata: {name: b}\nstringData: {\"a b\": MARKER}\n", `Secret "b": data[a b]: Invalid value: "a b": a valid config key`},
	} {
		_, err := Decode("f.yaml", []byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v\nwant %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "MARKER") {
			t.Errorf("%s: the error shows a value: %v", c.name, err)
		}
	}
}
