package keyring

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/objects"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func jsonSecret(name, auths string) *objects.Object {
	return &objects.Object{Ref: objects.Ref{Kind: objects.Secret, Namespace: "default", Name: name},
		Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":` + auths + `}`)}}
}

func users(cs []Credential) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Username+":"+c.Password)
	}
	return out
}

// Which logins an image is pulled with, by the kubelet's keyring rules
// (pkg/credentialprovider keyring_test.go's cases).
func TestLookup(t *testing.T) {
	cases := []struct {
		name   string
		auths  string
		image  string
		logins []string
	}{
		{"host", `{"registry.example:5000": {"username": "u", "password": "p"}}`, "registry.example:5000/team/app:1", []string{"u:p"}},
		{"auth wins over username", `{"registry.example": {"username": "x", "password": "y", "auth": "` + b64("u:p:w") + `"}}`, "registry.example/app", []string{"u:p:w"}},
		{"auth without padding", `{"registry.example": {"auth": "` + strings.TrimRight(b64("ab:c"), "=") + `"}}`, "registry.example/app", []string{"ab:c"}},
		{"scheme and /v2/ mean the host", `{"https://registry.example/v2/": {"username": "u", "password": "p"}}`, "registry.example/app", []string{"u:p"}},
		{"another port", `{"registry.example:5000": {"username": "u", "password": "p"}}`, "registry.example:5001/app", nil},
		{"no port is not any port", `{"registry.example": {"username": "u", "password": "p"}}`, "registry.example:5000/app", nil},
		{"another host", `{"registry.example": {"username": "u", "password": "p"}}`, "other.example/app", nil},
		{"path prefix", `{"quay.io/coreos": {"username": "u", "password": "p"}}`, "quay.io/coreos/etcd", []string{"u:p"}},
		{"path is a string prefix", `{"quay.io/core": {"username": "u", "password": "p"}}`, "quay.io/coreos/etcd", []string{"u:p"}},
		{"other path", `{"quay.io/coreos": {"username": "u", "password": "p"}}`, "quay.io/other/etcd", nil},
		{"most specific first", `{"quay.io": {"username": "host", "password": "p"}, "quay.io/coreos": {"username": "path", "password": "p"}}`,
			"quay.io/coreos/etcd", []string{"path:p", "host:p"}},
		{"wildcard label", `{"*.example.com": {"username": "u", "password": "p"}}`, "eu.example.com/app", []string{"u:p"}},
		{"wildcard is one label", `{"*.example.com": {"username": "u", "password": "p"}}`, "a.eu.example.com/app", nil},
		{"wildcard in a label", `{"registry-*.example.com": {"username": "u", "password": "p"}}`, "registry-eu.example.com/app", []string{"u:p"}},
		{"Docker Hub's v1 URL", `{"https://index.docker.io/v1/": {"username": "u", "password": "p"}}`, "busybox", []string{"u:p"}},
		{"Docker Hub as index.docker.io", `{"index.docker.io": {"username": "u", "password": "p"}}`, "docker.io/library/busybox:1", []string{"u:p"}},
		{"Docker Hub user repository", `{"index.docker.io": {"username": "u", "password": "p"}}`, "team/app", []string{"u:p"}},
		{"Docker Hub as docker.io", `{"docker.io": {"username": "u", "password": "p"}}`, "busybox", []string{"u:p"}},
		{"Docker Hub's login is not another registry's", `{"https://index.docker.io/v1/": {"username": "u", "password": "p"}}`, "registry.example/app", nil},
		{"digest", `{"registry.example": {"username": "u", "password": "p"}}`,
			"registry.example/app@sha256:" + strings.Repeat("a", 64), []string{"u:p"}},
		{"invalid image", `{"registry.example": {"username": "u", "password": "p"}}`, "Registry.example/UPPER", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, err := New([]*objects.Object{jsonSecret("s", c.auths)})
			if err != nil {
				t.Fatal(err)
			}
			if got := users(k.Lookup(c.image)); !reflect.DeepEqual(got, c.logins) {
				t.Fatalf("Lookup(%q) = %v, want %v", c.image, got, c.logins)
			}
		})
	}
}

// Logins of several secrets for one registry are tried in the pod's order
// of its secrets; a legacy .dockercfg counts as a .dockerconfigjson; a
// secret of another type, or without its key, gives nothing.
func TestSecretsInOrder(t *testing.T) {
	legacy := &objects.Object{Ref: objects.Ref{Kind: objects.Secret, Name: "legacy"}, Type: v1.SecretTypeDockercfg,
		Data: map[string][]byte{v1.DockerConfigKey: []byte(`{"registry.example": {"auth": "` + b64("legacy:p") + `"}}`)}}
	opaque := &objects.Object{Ref: objects.Ref{Kind: objects.Secret, Name: "opaque"}, Type: v1.SecretTypeOpaque,
		Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths": {"registry.example": {"auth": "` + b64("opaque:p") + `"}}}`)}}
	wrongKey := &objects.Object{Ref: objects.Ref{Kind: objects.Secret, Name: "wrong-key"}, Type: v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigKey: []byte(`{"registry.example": {"auth": "` + b64("wrongkey:p") + `"}}`)}}
	k, err := New([]*objects.Object{
		jsonSecret("first", `{"registry.example": {"username": "first", "password": "p"}}`),
		opaque, wrongKey, legacy,
		jsonSecret("third", `{"registry.example": {"username": "third", "password": "p"}}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := users(k.Lookup("registry.example/app")), []string{"first:p", "legacy:p", "third:p"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("logins %v, want %v", got, want)
	}
}

// A malformed secret is an error naming the secret and its key, and never
// quoting its data.
func TestMalformedSecret(t *testing.T) {
	for _, c := range []struct{ name, data, want string }{
		{"not json", `{"auths": hunter2}`, `image pull secret "bad": .dockerconfigjson: invalid JSON at offset`},
		{"auth not base64", `{"auths": {"r.example": {"auth": "hunter2!!"}}}`, `image pull secret "bad": .dockerconfigjson: illegal base64 data`},
		{"auth without colon", `{"auths": {"r.example": {"auth": "` + b64("hunter2") + `"}}}`, "must be formatted as base64(username:password)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := jsonSecret("bad", "")
			s.Data[v1.DockerConfigJsonKey] = []byte(c.data)
			_, err := New([]*objects.Object{s})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "'h'") {
				t.Fatalf("the error quotes the secret: %v", err)
			}
		})
	}
}

// A credential never prints, however it is formatted or logged.
func TestCredentialRedacted(t *testing.T) {
	c := Credential{Username: "fleet", Password: "hunter2"}
	var log strings.Builder
	slog.New(slog.NewTextHandler(&log, nil)).Info("pull", "cred", c, "creds", []Credential{c})
	slog.New(slog.NewJSONHandler(&log, nil)).Info("pull", "cred", c, "creds", []Credential{c}, "in", struct{ C []Credential }{[]Credential{c}})
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s %q", c, c, c, c, c), fmt.Sprint([]Credential{c}),
		fmt.Sprintf("%+v", struct{ C Credential }{c}), log.String()} {
		if strings.Contains(s, "hunter2") || strings.Contains(s, "fleet") {
			t.Fatalf("a credential printed: %s", s)
		}
	}
}

type getter map[string]*objects.Object

func (g getter) Get(r objects.Ref) (*objects.Object, error) {
	if o, ok := g[r.Namespace+"/"+r.Name]; ok && r.Kind == objects.Secret {
		return o, nil
	}
	return nil, &objects.NotFoundError{Ref: r}
}

// The pod's pull secrets in its order, from its namespace; those that
// cannot be read are named for the kubelet's warning, and unnamed entries
// are ignored.
func TestPullSecrets(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team"}, Spec: v1.PodSpec{ImagePullSecrets: []v1.LocalObjectReference{
		{Name: "b"}, {Name: ""}, {Name: "gone"}, {Name: "a"}, {Name: "elsewhere"}}}}
	a, b := jsonSecret("a", `{}`), jsonSecret("b", `{}`)
	get := getter{"team/a": a, "team/b": b, "default/elsewhere": jsonSecret("elsewhere", `{}`)}
	found, missing := PullSecrets(pod, get)
	if len(found) != 2 || found[0] != b || found[1] != a {
		t.Fatalf("found %v, want b then a", found)
	}
	if !reflect.DeepEqual(missing, []string{"gone", "elsewhere"}) {
		t.Fatalf("missing %v", missing)
	}
	if got, want := MissingMessage(missing), "Unable to retrieve some image pull secrets (gone, elsewhere); attempting to pull the image may not succeed."; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if _, missing := PullSecrets(pod, nil); !reflect.DeepEqual(missing, []string{"b", "gone", "a", "elsewhere"}) {
		t.Fatalf("without a getter, missing %v", missing)
	}
	if _, err := (getter{}).Get(objects.Ref{Kind: objects.Secret, Name: "x"}); !errors.Is(err, objects.ErrNotFound) {
		t.Fatal(err)
	}
}
