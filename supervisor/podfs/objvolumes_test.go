package podfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/test/prereq"
)

// fakeObjects is a Getter over a map, changed by the tests.
type fakeObjects struct {
	mu   sync.Mutex
	objs map[objects.Ref]*objects.Object
}

func newFakeObjects(objs ...*objects.Object) *fakeObjects {
	f := &fakeObjects{objs: map[objects.Ref]*objects.Object{}}
	for _, o := range objs {
		f.put(o)
	}
	return f
}

func (f *fakeObjects) put(o *objects.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objs[o.Ref] = o
}

func (f *fakeObjects) remove(r objects.Ref) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.objs, r)
}

func (f *fakeObjects) Get(r objects.Ref) (*objects.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o, ok := f.objs[r]; ok {
		return o, nil
	}
	return nil, &objects.NotFoundError{Ref: r}
}

func configMap(name string, data map[string]string) *objects.Object {
	o := &objects.Object{Ref: objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		o.Data[k] = []byte(v)
	}
	return o
}

func secret(name string, data map[string]string) *objects.Object {
	o := configMap(name, data)
	o.Kind = objects.Secret
	return o
}

// visibleEntries are the names in a volume not hidden by the writer.
func visibleEntries(t *testing.T, dir string) []string {
	var out []string
	for _, n := range volumeEntries(t, dir) {
		if !strings.HasPrefix(n, "..") {
			out = append(out, n)
		}
	}
	return out
}

func i32(v int32) *int32 { return &v }
func yes() *bool         { b := true; return &b }

func TestObjectPayload(t *testing.T) {
	get := newFakeObjects(configMap("app", map[string]string{"a": "A", "b": "B"}), secret("db", map[string]string{"pw": "x"}))
	cm := objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"}
	sec := objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"}
	gone := objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "gone"}
	for _, tc := range []struct {
		name     string
		get      objects.Getter
		ref      objects.Ref
		items    []v1.KeyToPath
		optional bool
		want     map[string]fileProjection
		wantErr  string
	}{
		{name: "every key", get: get, ref: cm,
			want: map[string]fileProjection{"a": {Data: []byte("A"), Mode: 0o640}, "b": {Data: []byte("B"), Mode: 0o640}}},
		{name: "items", get: get, ref: cm, items: []v1.KeyToPath{{Key: "b", Path: "x/b", Mode: i32(0o400)}, {Key: "a", Path: "a2"}},
			want: map[string]fileProjection{"x/b": {Data: []byte("B"), Mode: 0o400}, "a2": {Data: []byte("A"), Mode: 0o640}}},
		{name: "missing config key", get: get, ref: cm, items: []v1.KeyToPath{{Key: "nope", Path: "n"}},
			wantErr: "configmap references non-existent config key: nope"},
		{name: "missing secret key", get: get, ref: sec, items: []v1.KeyToPath{{Key: "user", Path: "u"}},
			wantErr: "references non-existent secret key: user"},
		{name: "missing key, optional", get: get, ref: cm, optional: true, items: []v1.KeyToPath{{Key: "nope", Path: "n"}, {Key: "a", Path: "a"}},
			want: map[string]fileProjection{"a": {Data: []byte("A"), Mode: 0o640}}},
		{name: "missing object", get: get, ref: gone, wantErr: `configmap "gone" not found`},
		{name: "missing secret", get: get, ref: objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "s"}, wantErr: `secret "s" not found`},
		{name: "missing object, optional", get: get, ref: gone, optional: true, items: []v1.KeyToPath{{Key: "a", Path: "a"}},
			want: map[string]fileProjection{}},
		{name: "no getter", ref: cm, wantErr: `configmap "app" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := objectPayload(tc.get, tc.ref, tc.items, 0o640, tc.optional)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("payload %v, want %v", got, tc.want)
			}
			for k, w := range tc.want {
				if g, ok := got[k]; !ok || string(g.Data) != string(w.Data) || g.Mode != w.Mode {
					t.Errorf("%s: %+v, want %+v", k, g, w)
				}
			}
		})
	}
}

// A projected volume combines its sources with its defaultMode; the
// sources that fail are all reported, as the kubelet aggregates them.
func TestProjectedPayload(t *testing.T) {
	get := newFakeObjects(configMap("app", map[string]string{"a": "A"}), secret("db", map[string]string{"pw": "x"}))
	pod := testPod(nil, nil)
	node := testNode
	node.Objects = get
	proj := &v1.ProjectedVolumeSource{DefaultMode: i32(0o600), Sources: []v1.VolumeProjection{
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}},
		{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Items: []v1.KeyToPath{{Key: "pw", Path: "secret/pw", Mode: i32(0o400)}}}},
		{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "extra"}, Optional: yes()}},
		{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{fieldItem("name", "metadata.name")}}},
	}}
	got, err := projectedPayload(pod, proj, node)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]fileProjection{"a": {Data: []byte("A"), Mode: 0o600}, "secret/pw": {Data: []byte("x"), Mode: 0o400}, "name": {Data: []byte("web"), Mode: 0o600}}
	if len(got) != len(want) {
		t.Fatalf("payload %v, want %v", got, want)
	}
	for k, w := range want {
		if g := got[k]; string(g.Data) != string(w.Data) || g.Mode != w.Mode {
			t.Errorf("%s: %+v, want %+v", k, g, w)
		}
	}
	proj.Sources = append(proj.Sources,
		v1.VolumeProjection{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "gone"}}},
		v1.VolumeProjection{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Items: []v1.KeyToPath{{Key: "user", Path: "u"}}}})
	_, err = projectedPayload(pod, proj, node)
	if want := `[configmap "gone" not found, references non-existent secret key: user]`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// objectPod is a pod with a configMap volume (also mounted at a subPath),
// an optional secret volume and a projected one.
func objectPod() *v1.Pod {
	pod := testPod([]v1.Volume{
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}},
		{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "db", Optional: yes(), DefaultMode: i32(0o400)}}},
		{Name: "all", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "app"}, Items: []v1.KeyToPath{{Key: "conf", Path: "etc/conf"}}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{fieldItem("name", "metadata.name")}}},
		}}}},
	}, []v1.VolumeMount{
		{Name: "cfg", MountPath: "/cfg"},
		{Name: "sec", MountPath: "/sec"},
		{Name: "all", MountPath: "/all"},
		{Name: "cfg", MountPath: "/etc/app.conf", SubPath: "conf"},
	})
	return pod
}

// Object volumes are tmpfs mounts the containers get read-only, with the
// objects' keys as files; a missing object is the kubelet's FailedMount,
// typed; an optional one is an empty volume. Updates reach the volume,
// not a subPath; removing the pod unmounts everything.
func TestObjectVolumes(t *testing.T) {
	prereq.Root(t, "mounting tmpfs and bind-mounting subPaths")
	fs := newTestFS(t)
	get := newFakeObjects()
	node := testNode
	node.Objects = get
	pod := objectPod()
	c := &pod.Spec.Containers[0]
	t.Cleanup(func() { fs.RemovePod(pod.UID) })

	// The configMap is missing: FailedMount, with the kubelet's words.
	_, err := fs.Mounts(pod, c, node, nil)
	var me *runtime.MountError
	if want := `MountVolume.SetUp failed for volume "cfg" : configmap "app" not found`; !errors.As(err, &me) || err.Error() != want {
		t.Fatalf("error %v, want the MountError %q", err, want)
	}
	if ce := runtime.ConfigError(err); ce.Reason != runtime.FailedMount || ce.Message != me.Error() {
		t.Fatalf("ConfigError %+v, want FailedMount", ce)
	}

	get.put(configMap("app", map[string]string{"conf": "v1", "other": "o"}))
	mounts, err := fs.Mounts(pod, c, node, nil)
	if err != nil {
		t.Fatal(err)
	}
	vols := filepath.Join(fs.podDir(pod.UID), "volumes")
	for i, name := range []string{"cfg", "sec", "all"} {
		if m := mounts[i]; m.Source != filepath.Join(vols, name) || !m.ReadOnly {
			t.Errorf("mount %+v, want %s read-only", m, name)
		}
		if !isMountPoint(filepath.Join(vols, name)) {
			t.Errorf("%s is not a tmpfs of its own", name)
		}
	}
	if got := readFile(t, filepath.Join(vols, "cfg", "conf")); got != "v1" {
		t.Errorf("cfg/conf %q", got)
	}
	if st, err := os.Stat(filepath.Join(vols, "cfg", "other")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("cfg/other: %v %v, want mode 644 (the default)", st, err)
	}
	if got := visibleEntries(t, filepath.Join(vols, "sec")); len(got) != 0 {
		t.Errorf("optional missing secret: volume holds %v, want nothing", got)
	}
	if got := readFile(t, filepath.Join(vols, "all", "etc", "conf")) + readFile(t, filepath.Join(vols, "all", "name")); got != "v1web" {
		t.Errorf("projected files %q", got)
	}
	subPath := mounts[3]
	if subPath.Destination != "/etc/app.conf" || !subPath.ReadOnly || readFile(t, subPath.Source) != "v1" {
		t.Fatalf("subPath mount %+v", subPath)
	}

	// Refreshed: the volumes change, the subPath keeps what it had.
	if changed, err := fs.RefreshObjectVolumes(pod, node); err != nil || changed {
		t.Fatalf("refresh without a change: %v, %v", changed, err)
	}
	get.put(configMap("app", map[string]string{"conf": "v2"}))
	get.put(secret("db", map[string]string{"pw": "s3cret"}))
	if changed, err := fs.RefreshObjectVolumes(pod, node); err != nil || !changed {
		t.Fatalf("refresh after a change: %v, %v", changed, err)
	}
	if got := readFile(t, filepath.Join(vols, "cfg", "conf")) + readFile(t, filepath.Join(vols, "all", "etc", "conf")); got != "v2v2" {
		t.Errorf("updated files %q", got)
	}
	if _, err := os.Lstat(filepath.Join(vols, "cfg", "other")); !os.IsNotExist(err) {
		t.Errorf("a key no longer in the configMap is left: %v", err)
	}
	if st, err := os.Stat(filepath.Join(vols, "sec", "pw")); err != nil || st.Mode().Perm() != 0o400 {
		t.Errorf("sec/pw: %v %v, want mode 400 (defaultMode)", st, err)
	}
	if got := readFile(t, subPath.Source); got != "v1" {
		t.Errorf("subPath content %q after an update, want the old v1", got)
	}

	// The configMap goes: its volumes keep their files, the error says
	// FailedMount; the optional secret goes: its volume is emptied.
	get.remove(objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"})
	get.remove(objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"})
	changed, err := fs.RefreshObjectVolumes(pod, node)
	if !changed || !errors.As(err, &me) || !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "cfg" : configmap "app" not found`) {
		t.Fatalf("refresh without the configMap: %v, %v", changed, err)
	}
	if got := readFile(t, filepath.Join(vols, "cfg", "conf")); got != "v2" {
		t.Errorf("cfg/conf %q, want the last content kept", got)
	}
	if got := visibleEntries(t, filepath.Join(vols, "sec")); len(got) != 0 {
		t.Errorf("deleted optional secret: volume holds %v", got)
	}
	// A container of the pod still (re)starts, with what the volume holds.
	if _, err := fs.Mounts(pod, c, node, nil); err != nil {
		t.Fatalf("a restart with a volume set up before: %v", err)
	}

	fs.RemovePod(pod.UID)
	if _, err := os.Stat(fs.podDir(pod.UID)); !os.IsNotExist(err) {
		t.Fatalf("pod directory left: %v", err)
	}
	if strings.Contains(readFile(t, "/proc/self/mounts"), fs.podDir(pod.UID)) {
		t.Fatal("mounts left under the pod directory")
	}
}

// With an fsGroup, an object volume's files get the group and at least
// r--r----- (the conformance tests' -r--r----- for defaultMode 0440 and
// fsGroup 1001), directories setgid.
func TestObjectVolumeFSGroup(t *testing.T) {
	prereq.Root(t, "mounting tmpfs and changing group ownership")
	fs := newTestFS(t)
	node := testNode
	node.Objects = newFakeObjects(secret("db", map[string]string{"data-1": "value-1", "x": "y"}))
	pod := testPod([]v1.Volume{{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "db",
		DefaultMode: i32(0o440), Items: []v1.KeyToPath{{Key: "data-1", Path: "data-1"}, {Key: "x", Path: "d/x", Mode: i32(0o400)}}}}}},
		[]v1.VolumeMount{{Name: "sec", MountPath: "/s"}})
	group := int64(1001)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: &group}
	t.Cleanup(func() { fs.RemovePod(pod.UID) })
	if _, err := fs.Mounts(pod, &pod.Spec.Containers[0], node, nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(fs.podDir(pod.UID), "volumes", "sec")
	for p, want := range map[string]os.FileMode{"data-1": 0o440, "d/x": 0o440, "d": 0o755 | os.ModeSetgid | os.ModeDir} {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeDir); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
		if gid := st.Sys().(*syscall.Stat_t).Gid; gid != 1001 {
			t.Errorf("%s: group %d, want the fsGroup", p, gid)
		}
	}
}

// The tmpfs grows with its objects.
func TestObjectVolumeTmpfsGrows(t *testing.T) {
	prereq.Root(t, "mounting tmpfs")
	fs := newTestFS(t)
	get := newFakeObjects(configMap("app", map[string]string{"a": "small"}))
	node := testNode
	node.Objects = get
	pod := testPod([]v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}}},
		[]v1.VolumeMount{{Name: "cfg", MountPath: "/c"}})
	t.Cleanup(func() { fs.RemovePod(pod.UID) })
	if _, err := fs.Mounts(pod, &pod.Spec.Containers[0], node, nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(fs.podDir(pod.UID), "volumes", "cfg")
	size := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Blocks) * int64(st.Bsize)
	}
	if got, want := size(), int64(3*tmpfsPage+tmpfsHeadroom); got != want {
		t.Errorf("tmpfs of %d bytes, want %d", got, want)
	}
	big := strings.Repeat("x", 1<<20)
	get.put(configMap("app", map[string]string{"a": big}))
	if _, err := fs.RefreshObjectVolumes(pod, node); err != nil {
		t.Fatal(err)
	}
	if got, want := size(), int64(3<<20+tmpfsHeadroom); got != want {
		t.Errorf("tmpfs of %d bytes after growing, want %d", got, want)
	}
	if got := readFile(t, filepath.Join(dir, "a")); got != big {
		t.Errorf("a: %d bytes", len(got))
	}
}

// Many keys of the longest names, each a page and a link of a page,
// written and updated twice: all of it fits the tmpfs sized for it.
func TestObjectVolumeTmpfsFitsLongKeys(t *testing.T) {
	prereq.Root(t, "mounting tmpfs")
	fs := newTestFS(t)
	many := map[string]string{}
	for i := range 100 {
		many[fmt.Sprintf("%03d", i)+strings.Repeat("k", 250)] = strconv.Itoa(i)
	}
	get := newFakeObjects(configMap("app", many))
	node := testNode
	node.Objects = get
	pod := testPod([]v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}}},
		[]v1.VolumeMount{{Name: "cfg", MountPath: "/c"}})
	t.Cleanup(func() { fs.RemovePod(pod.UID) })
	if _, err := fs.Mounts(pod, &pod.Spec.Containers[0], node, nil); err != nil {
		t.Fatal(err)
	}
	for round := range 3 { // three generations at once, the third one written
		many["000"+strings.Repeat("k", 250)] = "round " + strconv.Itoa(round)
		get.put(configMap("app", many))
		if _, err := fs.RefreshObjectVolumes(pod, node); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if got := len(visibleEntries(t, filepath.Join(fs.podDir(pod.UID), "volumes", "cfg"))); got != 100 {
		t.Errorf("%d keys in the volume, want 100", got)
	}
}

// A subPath follows the writer's links but not out of the volume.
func TestResolveBeneath(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "..ts", "d"), 0o755)
	os.WriteFile(filepath.Join(dir, "..ts", "d", "f"), nil, 0o644)
	os.Symlink("..ts", filepath.Join(dir, "..data"))
	os.Symlink("..data/d", filepath.Join(dir, "d"))
	os.Symlink("/etc", filepath.Join(dir, "abs"))
	os.Symlink("../..", filepath.Join(dir, "..ts", "up"))
	os.Symlink("loop", filepath.Join(dir, "loop"))
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for rel, want := range map[string]string{"d/f": "..ts/d/f", "d": "..ts/d", "./d/../d/f": "..ts/d/f", "missing/x": "missing/x"} {
		if got, err := resolveBeneath(root, rel); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", rel, got, err, want)
		}
	}
	for rel, want := range map[string]error{"abs": errLinkEscapes, "..data/up": errLinkEscapes, "..": errLinkEscapes, "loop": unix.ELOOP} {
		if _, err := resolveBeneath(root, rel); !errors.Is(err, want) {
			t.Errorf("%s: error %v, want %v", rel, err, want)
		}
	}
	f, err := openThroughOwnLinks(root, "d/f")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// Refreshing a pod's object volumes: unchanged (the cost of every
// ObjectsChanged for a pod whose objects did not change) and changed (an
// atomic swap), for a configMap of 10 keys of 1 KiB on tmpfs.
func BenchmarkRefreshObjectVolumes(b *testing.B) {
	prereq.Root(b, "mounting tmpfs")
	for _, change := range []bool{false, true} {
		name := "unchanged"
		if change {
			name = "changed"
		}
		b.Run(name, func(b *testing.B) {
			fs := New(Options{DataDir: b.TempDir()})
			data := map[string]string{}
			for i := range 10 {
				data["key"+strconv.Itoa(i)] = strings.Repeat("x", 1024)
			}
			get := newFakeObjects(configMap("app", data))
			node := testNode
			node.Objects = get
			pod := testPod([]v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}}},
				[]v1.VolumeMount{{Name: "cfg", MountPath: "/c"}})
			b.Cleanup(func() { fs.RemovePod(pod.UID) })
			if _, err := fs.Mounts(pod, &pod.Spec.Containers[0], node, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if change {
					data["key0"] = strconv.Itoa(i)
					get.put(configMap("app", data))
				}
				if changed, err := fs.RefreshObjectVolumes(pod, node); err != nil || changed != change {
					b.Fatalf("changed %v, %v", changed, err)
				}
			}
		})
	}
}
