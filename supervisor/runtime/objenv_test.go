package runtime

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/objects"
)

// objectMap is a Getter over a fixed set of objects.
type objectMap map[objects.Ref]*objects.Object

func (m objectMap) Get(r objects.Ref) (*objects.Object, error) {
	if o, ok := m[r]; ok {
		return o, nil
	}
	return nil, &objects.NotFoundError{Ref: r}
}

func obj(kind objects.Kind, name string, kv ...string) *objects.Object {
	o := &objects.Object{Ref: objects.Ref{Kind: kind, Namespace: "default", Name: name}, Data: map[string][]byte{}}
	for i := 0; i+1 < len(kv); i += 2 {
		o.Data[kv[i]] = []byte(kv[i+1])
	}
	return o
}

func store(objs ...*objects.Object) objectMap {
	m := objectMap{}
	for _, o := range objs {
		m[o.Ref] = o
	}
	return m
}

func envPod(c v1.Container) *v1.Pod {
	c.Name = "app"
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{}, Containers: []v1.Container{c}}}
}

func yes() *bool { t := true; return &t }

func cmKey(name, key string, optional *bool) *v1.EnvVarSource {
	return &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key, Optional: optional}}
}

func secretKey(name, key string, optional *bool) *v1.EnvVarSource {
	return &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key, Optional: optional}}
}

func resolveEnv(t *testing.T, c v1.Container, objs objects.Getter) ([]string, error) {
	t.Helper()
	pod := envPod(c)
	p, err := Resolve(pod, &pod.Spec.Containers[0], PodEnv{Objects: objs})
	if err != nil {
		return nil, err
	}
	return p.Env[2:], nil // after PATH and HOSTNAME
}

func TestEnvFromObjects(t *testing.T) {
	objs := store(
		obj(objects.ConfigMap, "app", "MODE", "prod", "LEVEL", "3"),
		obj(objects.ConfigMap, "more", "MODE", "dev"),
		obj(objects.Secret, "db", "PASSWORD", "s3cret", "USER", "admin"),
	)
	c := v1.Container{
		EnvFrom: []v1.EnvFromSource{
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}},
			{Prefix: "DB_", SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "db"}}},
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "more"}}}, // later source wins
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "gone"}, Optional: yes()}},
		},
		Env: []v1.EnvVar{
			{Name: "LEVEL", Value: "override-$(MODE)"}, // env replaces envFrom and expands from it
			{Name: "URL", Value: "postgres://$(DB_USER)@db"},
			{Name: "KEY", ValueFrom: cmKey("app", "MODE", nil)},
			{Name: "PW", ValueFrom: secretKey("db", "PASSWORD", nil)},
			{Name: "OPT", ValueFrom: cmKey("app", "nokey", yes())},   // optional key: unset
			{Name: "OPT2", ValueFrom: secretKey("none", "k", yes())}, // optional object: unset
			{Name: "MODE", ValueFrom: cmKey("none", "MODE", yes())},  // skipped: keeps the envFrom value
			{Name: "LATE", Value: "$(PW)"},
		},
	}
	env, err := resolveEnv(t, c, objs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"LEVEL=override-dev", "MODE=dev", "DB_PASSWORD=s3cret", "DB_USER=admin",
		"URL=postgres://admin@db", "KEY=prod", "PW=s3cret", "LATE=s3cret"}
	if strings.Join(env, " ") != strings.Join(want, " ") {
		t.Fatalf("env\n got %q\nwant %q", env, want)
	}
}

// The errors are the kubelet's (the API server's for a missing object),
// and none holds a Secret's value.
func TestEnvObjectErrors(t *testing.T) {
	objs := store(obj(objects.ConfigMap, "app", "MODE", "prod"), obj(objects.Secret, "db", "PASSWORD", "s3cret"))
	ref := func(kind string, name string) []v1.EnvFromSource {
		lo := v1.LocalObjectReference{Name: name}
		if kind == "cm" {
			return []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: lo}}}
		}
		return []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: lo}}}
	}
	for _, tc := range []struct {
		name string
		c    v1.Container
		objs objects.Getter
		want string
	}{
		{"configmap missing", v1.Container{EnvFrom: ref("cm", "x")}, objs, `configmap "x" not found`},
		{"secret missing", v1.Container{EnvFrom: ref("secret", "x")}, objs, `secret "x" not found`},
		{"no source", v1.Container{EnvFrom: ref("cm", "app")}, nil, `configmap "app" not found`},
		{"key ref object missing", v1.Container{Env: []v1.EnvVar{{Name: "A", ValueFrom: secretKey("nope", "k", nil)}}}, objs, `secret "nope" not found`},
		{"configmap key missing", v1.Container{Env: []v1.EnvVar{{Name: "A", ValueFrom: cmKey("app", "k", nil)}}}, objs, `couldn't find key k in ConfigMap default/app`},
		{"secret key missing", v1.Container{Env: []v1.EnvVar{{Name: "A", ValueFrom: secretKey("db", "k", nil)}}}, objs, `couldn't find key k in Secret default/db`},
		{"optional object, key missing", v1.Container{Env: []v1.EnvVar{{Name: "A", ValueFrom: secretKey("db", "k", nil)},
			{Name: "B", ValueFrom: secretKey("db", "PASSWORD", yes())}}}, objs, `couldn't find key k in Secret default/db`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := resolveEnv(t, tc.c, tc.objs)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if tc.objs != nil && strings.Contains(err.Error(), "s3cret") {
				t.Fatal("a Secret's value in an error")
			}
		})
	}
}

// A Getter's other errors pass through; each object is read once per
// container, so all its variables come from one version.
func TestEnvObjectReadOnce(t *testing.T) {
	n := 0
	g := getterFunc(func(r objects.Ref) (*objects.Object, error) {
		n++
		if r.Name == "broken" {
			return nil, errors.New("objects store unavailable")
		}
		return obj(objects.ConfigMap, r.Name, "A", "1", "B", "2"), nil
	})
	c := v1.Container{
		EnvFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}},
		Env:     []v1.EnvVar{{Name: "X", ValueFrom: cmKey("app", "A", nil)}, {Name: "Y", ValueFrom: cmKey("app", "B", nil)}},
	}
	if _, err := resolveEnv(t, c, g); err != nil || n != 1 {
		t.Fatalf("err %v, %d reads", err, n)
	}
	c.Env = append(c.Env, v1.EnvVar{Name: "Z", ValueFrom: cmKey("broken", "A", yes())})
	if _, err := resolveEnv(t, c, g); err == nil || err.Error() != "objects store unavailable" {
		t.Fatalf("err = %v", err)
	}
}

type getterFunc func(objects.Ref) (*objects.Object, error)

func (f getterFunc) Get(r objects.Ref) (*objects.Object, error) { return f(r) }

// Keys that were no C identifiers are passed on, as the kubelet does
// since RelaxedEnvironmentVariableValidation went GA (it used to skip
// them with an InvalidEnvironmentVariableNames event).
func TestEnvFromRelaxedNames(t *testing.T) {
	objs := store(obj(objects.ConfigMap, "app", "1st.key-name", "v"))
	c := v1.Container{EnvFrom: []v1.EnvFromSource{{Prefix: "my.", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}}}
	env, err := resolveEnv(t, c, objs)
	if err != nil || strings.Join(env, " ") != "my.1st.key-name=v" {
		t.Fatalf("env %q, %v", env, err)
	}
}

// SecretEnv names exactly the variables holding a Secret's data: set from
// one, or expanded from such a variable; a later plain value clears it.
func TestSecretEnvTaint(t *testing.T) {
	objs := store(obj(objects.Secret, "db", "pw", "s3cret", "user", "u"), obj(objects.ConfigMap, "app", "MODE", "prod"))
	c := v1.Container{
		Command: []string{"run"},
		Args:    []string{"--pw=$(PW)"},
		EnvFrom: []v1.EnvFromSource{
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}},
			{Prefix: "DB_", SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "db"}}},
		},
		Env: []v1.EnvVar{
			{Name: "PW", ValueFrom: secretKey("db", "pw", nil)},
			{Name: "DSN", Value: "x:$(PW)@h"},
			{Name: "PLAIN", Value: "mode-$(MODE)"},
			{Name: "DB_user", Value: "overridden"},
			{Name: "OPT", ValueFrom: secretKey("none", "k", yes())},
		},
	}
	pod := envPod(c)
	p, err := Resolve(pod, &pod.Spec.Containers[0], PodEnv{Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"DB_pw": true, "PW": true, "DSN": true}
	if len(p.SecretEnv) != len(want) || !p.Secret() {
		t.Fatalf("SecretEnv %v, want %v", p.SecretEnv, want)
	}
	for k := range want {
		if !p.SecretEnv[k] {
			t.Fatalf("SecretEnv %v, want %v", p.SecretEnv, want)
		}
	}
	if strings.Join(p.Argv, " ") != "run --pw=s3cret" {
		t.Fatalf("argv %q", p.Argv)
	}
	// No Secret read, or none left in the environment: nothing secret.
	c.EnvFrom, c.Env = c.EnvFrom[:1], []v1.EnvVar{{Name: "PW", ValueFrom: secretKey("db", "pw", nil)}, {Name: "PW", Value: "plain"}}
	pod = envPod(c)
	if p, err = Resolve(pod, &pod.Spec.Containers[0], PodEnv{Objects: objs}); err != nil || p.Secret() || p.SecretEnv != nil {
		t.Fatalf("plain env: %v, SecretEnv %v", err, p.SecretEnv)
	}
}

// An object on its way from the hub holds the environment back, optional
// or not (it exists: the kubelet would find it), as ObjectsPending, never
// as a CreateContainerConfigError.
func TestEnvWaitsForPendingObjects(t *testing.T) {
	pending := getterFunc(func(r objects.Ref) (*objects.Object, error) { return nil, &objects.PendingError{Ref: r} })
	for _, c := range []v1.Container{
		{Env: []v1.EnvVar{{Name: "A", ValueFrom: secretKey("db", "k", nil)}}},
		{Env: []v1.EnvVar{{Name: "A", ValueFrom: cmKey("app", "k", yes())}}},
		{EnvFrom: []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Optional: yes()}}}},
	} {
		_, err := resolveEnv(t, c, pending)
		if !errors.Is(err, objects.ErrPending) || errors.Is(err, objects.ErrNotFound) {
			t.Fatalf("%+v: %v, want pending", c, err)
		}
		if ce := ConfigError(err); ce.Reason != ObjectsPending {
			t.Fatalf("ConfigError %+v, want ObjectsPending", ce)
		}
	}
}
