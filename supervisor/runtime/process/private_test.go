package process

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

type secretGetter map[string]string

func (g secretGetter) Get(r objects.Ref) (*objects.Object, error) {
	if r.Kind != objects.Secret || r.Name != "db" {
		return nil, &objects.NotFoundError{Ref: r}
	}
	o := &objects.Object{Ref: r, Data: map[string][]byte{}}
	for k, v := range g {
		o.Data[k] = []byte(v)
	}
	return o, nil
}

// secretPod is a pod whose container takes PW from Secret db and has it
// in its arguments too.
func secretPod() *v1.Pod {
	pod := testPod()
	pod.Spec.SecurityContext = &v1.PodSecurityContext{}
	c := &pod.Spec.Containers[0]
	c.Command, c.Args = []string{"sh", "-c", "sleep 1000; true", "--pw=$(PW)"}, nil
	c.Env = append(c.Env, v1.EnvVar{Name: "PW", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Key: "pw"}}})
	return pod
}

func marker(t *testing.T) string {
	b := make([]byte, 12)
	rand.Read(b)
	return "pv-secret-" + hex.EncodeToString(b)
}

// unmountPrivate unmounts the private specs' tmpfs the runtime mounted,
// at the end of the test, before its directory goes.
func unmountPrivate(t *testing.T, rt *Runtime) {
	t.Cleanup(func() {
		if isMountPoint(rt.privateDir()) {
			if err := unix.Unmount(rt.privateDir(), unix.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v", rt.privateDir(), err)
			}
		}
	})
}

// onDisk lists the files under root, but those under skip (checked to
// be a tmpfs), that hold s.
func onDisk(t *testing.T, root, skip, s string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if path == skip {
			return filepath.SkipDir
		}
		if !e.Type().IsRegular() {
			return nil
		}
		if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, []byte(s)) {
			found = append(found, path)
		}
		return nil
	})
	return found
}

// A container whose environment holds a Secret's data runs with it, under
// the keeper; spec.json holds neither the value nor the command, which
// are on the private tmpfs only; exec gets them, before and after a
// daemon restart; the private spec goes when the instance ends.
func TestSecretEnvStaysInMemory(t *testing.T) {
	e := newKeeperEnv(t, "", nil)
	unmountPrivate(t, e.rt)
	secret := marker(t)
	pod := secretPod()
	node := runtime.PodEnv{Objects: secretGetter{"pw": secret}}
	s, err := BuildSpec(pod, &pod.Spec.Containers[0], node)
	if err != nil {
		t.Fatal(err)
	}
	if !s.SecretEnv["PW"] || len(s.SecretEnv) != 1 {
		t.Fatalf("SecretEnv %v", s.SecretEnv)
	}
	kept := e.keptSpec()
	s.InstanceID, s.Cgroup, s.LogPath, s.LogMaxBytes, s.LogMaxFiles = kept.InstanceID, kept.Cgroup, kept.LogPath, kept.LogMaxBytes, kept.LogMaxFiles
	if s.PrivateFile, err = e.rt.preparePrivate(s.InstanceID, 4096); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(e.rt.privateDir(), &st); err != nil || int64(st.Type) != unix.TMPFS_MAGIC || !isMountPoint(e.rt.privateDir()) {
		t.Fatalf("%s is not a tmpfs of its own: %v", e.rt.privateDir(), err)
	}
	if fi, err := os.Stat(e.rt.privateDir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, %v", e.rt.privateDir(), fi.Mode(), err)
	}
	e.start(s)
	killAtCleanup(t, e.rt, s.InstanceID)

	leader := state(t, e.rt, s.InstanceID).LeaderPid
	environ, _ := os.ReadFile("/proc/" + strconv.Itoa(leader) + "/environ")
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(leader) + "/cmdline")
	if !bytes.Contains(environ, []byte("PW="+secret+"\x00")) || !bytes.Contains(cmdline, []byte("--pw="+secret)) {
		t.Fatalf("the container lacks its Secret: environ %q cmdline %q", environ, cmdline)
	}
	if found := onDisk(t, e.root, e.rt.privateDir(), secret); len(found) > 0 {
		t.Fatalf("the Secret's value on disk in %v", found)
	}
	var public shim.Spec
	shim.ReadJSON(filepath.Join(e.rt.instanceDir(s.InstanceID), shim.SpecFile), &public)
	if len(public.Argv) != 0 || !slices.Contains(public.Env, "POD=web") || public.PrivateFile != e.rt.privateFile(s.InstanceID) {
		t.Fatalf("spec.json: argv %q env %q private %q", public.Argv, public.Env, public.PrivateFile)
	}
	execEnv := func(rt *Runtime) []string {
		t.Helper()
		tg, err := rt.ExecTarget(pod, "app", s.InstanceID, runtime.PodEnv{}) // the objects gone: the start's env it is
		if err != nil {
			t.Fatal(err)
		}
		return tg.Env
	}
	if env := execEnv(e.rt); !slices.Equal(env, s.Env) {
		t.Fatalf("exec's env %q, want %q", env, s.Env)
	}

	rt2, byID := e.restarted(true)
	if !byID[s.InstanceID].Alive {
		t.Fatalf("not adopted: %+v", byID[s.InstanceID])
	}
	if env := execEnv(rt2); !slices.Equal(env, s.Env) {
		t.Fatalf("after a daemon restart exec's env %q, want %q", env, s.Env)
	}
	rt2.Kill(s.InstanceID)
	if x := <-rt2.Exits(); x.InstanceID != s.InstanceID {
		t.Fatalf("exit of %s", x.InstanceID)
	}
	if _, err := os.Stat(e.rt.privateFile(s.InstanceID)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the ended instance's private spec: %v", err)
	}
	// Without its private spec (gone with the instance, or its tmpfs
	// unmounted) a spec cannot be read whole: exec fails rather than run in
	// another environment, even with the objects at hand.
	if _, err := rt2.ExecTarget(pod, "app", s.InstanceID, node); err == nil {
		t.Fatal("exec without the private spec")
	}
	if err := rt2.Remove(s.InstanceID); err != nil {
		t.Fatal(err)
	}
}

// A daemon that cannot keep a Secret's data in memory does not start the
// container: it waits with CreateContainerConfigError saying why.
func TestSecretEnvWithoutMemoryWaits(t *testing.T) {
	root := t.TempDir()
	rt, err := New(filepath.Join(root, "containers"), []string{os.Args[0], "shim"}, runtime.Cgroups{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(rt.privateDir(), nil, 0o600) // no directory can be made there
	pod := secretPod()
	secret := marker(t)
	var got runtime.Started
	rt.Start(&runtime.Container{Pod: pod, Spec: &pod.Spec.Containers[0], InstanceID: "u-1_app_1",
		Node: runtime.PodEnv{Objects: secretGetter{"pw": secret}}, Cgroup: func() (string, error) { return "", nil }},
		func(s runtime.Started) { got = s })
	var ce *runtime.CreateError
	if !errors.As(got.Err, &ce) || ce.Reason != "CreateContainerConfigError" || !bytes.Contains([]byte(ce.Message), []byte("memory-backed")) {
		t.Fatalf("started = %+v", got)
	}
	if bytes.Contains([]byte(ce.Message), []byte(secret)) {
		t.Fatal("the message holds the Secret")
	}
	if entries, _ := os.ReadDir(rt.dir); len(entries) > 0 {
		t.Fatalf("an instance was made: %v", entries)
	}
}

// The private specs' tmpfs is mounted once (a second preparation finds
// it) and grows for a spec larger than its room.
func TestPrivateTmpfsGrows(t *testing.T) {
	if os.Geteuid() != 0 {
		missing(t, "root: the test mounts a tmpfs")
	}
	e := newEnv(t)
	unmountPrivate(t, e.rt)
	room := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(e.rt.privateDir(), &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * int64(st.Bsize)
	}
	if _, err := e.rt.preparePrivate("a", 4096); err != nil {
		t.Fatal(err)
	}
	small := room()
	if _, err := e.rt.preparePrivate("b", 4096); err != nil || room() != small {
		t.Fatalf("a second preparation: %v, room %d, was %d", err, room(), small)
	}
	if n := mountsAt(t, e.rt.privateDir()); n != 1 {
		t.Fatalf("%d mounts at %s, want 1", n, e.rt.privateDir())
	}
	big := 3 * small
	if _, err := e.rt.preparePrivate("c", int(big)); err != nil || room() < big {
		t.Fatalf("growing for %d bytes: %v, room %d", big, err, room())
	}
}

func mountsAt(t *testing.T, dir string) int {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range bytes.Split(data, []byte("\n")) {
		if f := bytes.Fields(l); len(f) > 4 && string(f[4]) == dir {
			n++
		}
	}
	return n
}
