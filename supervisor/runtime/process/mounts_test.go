package process

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/hostcmd"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
	"github.com/podvisor/podvisor/test/prereq"
)

// volumeHost is a volume and the host directories it is mounted over.
type volumeHost struct {
	root       string // everything the test makes is below it
	vol, roVol string // the volumes' host directories (the daemon's)
	dst, roDst string // existing host directories, the mountPaths
	hidden     string // a host file in dst the container must not see
}

func newVolumeHost(t *testing.T) volumeHost {
	prereq.Root(t, "mount namespaces and bind mounts")
	root := t.TempDir()
	h := volumeHost{root: root, vol: filepath.Join(root, "vol"), roVol: filepath.Join(root, "ro-vol"),
		dst: filepath.Join(root, "host", "app"), roDst: filepath.Join(root, "host", "conf")}
	// The host's directories are on a shared mount, as systemd makes /:
	// a container namespace that were not a slave would hand its mounts
	// back to the host's table.
	host := filepath.Join(root, "host")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", host, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(host, unix.MNT_DETACH) })
	if err := unix.Mount("", host, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{h.vol, h.roVol, h.dst, h.roDst} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.hidden = filepath.Join(h.dst, "host-file")
	for path, text := range map[string]string{filepath.Join(h.vol, "hello"): "from the volume\n",
		filepath.Join(h.roVol, "setting"): "from the read-only volume\n", h.hidden: "host\n"} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h volumeHost) mounts() []shim.Mount {
	return []shim.Mount{{Source: h.vol, Destination: h.dst}, {Source: h.roVol, Destination: h.roDst, ReadOnly: true}}
}

// script reads and writes through both mounts, then waits for go.
func (h volumeHost) script() []string {
	return []string{"sh", "-c", `cat ` + h.dst + `/hello ` + h.roDst + `/setting; ls ` + h.dst + `
if touch ` + h.roDst + `/x 2>/dev/null; then echo writable; else echo read-only; fi
echo written >` + h.dst + `/made
while [ ! -e ` + h.root + `/go ]; do sleep 0.05; done`}
}

// hostMounts are the host's mount table lines for mount points below
// dir: only the test's own, whatever other tests mount meanwhile.
func hostMounts(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, line)
		}
	}
	return out
}

// checkHostUntouched: the host's directories hold what they held, and no
// mount of the container's is in the host's table.
func (h volumeHost) checkHostUntouched(t *testing.T) {
	t.Helper()
	for _, p := range []string{filepath.Join(h.dst, "hello"), filepath.Join(h.dst, "made"), filepath.Join(h.roDst, "setting")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s on the host: %v", p, err)
		}
	}
	if m := hostMounts(t, h.root); len(m) != 1 || strings.Fields(m[0])[4] != filepath.Join(h.root, "host") {
		t.Errorf("the host's mount table holds more than the test's shared tmpfs:\n%s", strings.Join(m, "\n"))
	}
}

// inNS runs a command in the instance's mount namespace as probes and
// hooks do (the runtime's MountNS), and returns its output.
func inNS(t *testing.T, rt *Runtime, id string, argv ...string) string {
	t.Helper()
	ns, err := rt.MountNS(id)
	if err != nil || ns == nil {
		t.Fatalf("MountNS = %v, %v", ns, err)
	}
	defer ns.Close()
	var out bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := hostcmd.InMountNS(ns, cmd.Start); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v in the container's mount namespace: %v: %s", argv, err, out.String())
	}
	return out.String()
}

// execIn runs a command as "podvisor exec" does for instance id and
// returns its exit code.
func execIn(t *testing.T, rt *Runtime, id string, argv ...string) int {
	t.Helper()
	pid, start, err := rt.mountNSLeader(id)
	if err != nil || pid == 0 {
		t.Fatalf("mount namespace leader = %d, %v", pid, err)
	}
	code, err := Exec(runtime.ExecTarget{Env: []string{"PATH=" + shim.DefaultPath}, MountNSPid: pid, MountNSStart: start}, argv, false)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// killAtCleanup kills an instance's leader when the test ends, before
// its cgroup is removed (cleanups run last first): a test that fails
// half-way leaves no container, and so no cgroup, behind.
func killAtCleanup(t *testing.T, rt *Runtime, id string) {
	t.Cleanup(func() {
		var st shim.State
		if shim.ReadJSON(filepath.Join(rt.instanceDir(id), shim.StateFile), &st) != nil {
			return
		}
		if fd, err := pidfd.Open(st.LeaderPid, st.LeaderStart); err == nil {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			unix.Close(fd)
		}
	})
}

// A container with volume mounts sees each volume at its mountPath, the
// read-only one read-only, and the host's directory under it hidden; the
// host sees none of it, and exec and probes see what the container sees.
// When it ends, nothing of its namespace is left in the host's mount
// table.
func TestVolumesInTheContainersOwnMountNamespace(t *testing.T) {
	h := newVolumeHost(t)
	e := newEnv(t)
	s := e.spec(h.script()...)
	s.Mounts = h.mounts()
	e.start(s)
	killAtCleanup(t, e.rt, s.InstanceID)
	waitFor(t, "the container to write through its mount", func() bool {
		_, err := os.Stat(filepath.Join(h.vol, "made"))
		return err == nil
	})
	h.checkHostUntouched(t)
	leader := state(t, e.rt, s.InstanceID).LeaderPid
	own, _ := os.Readlink("/proc/self/ns/mnt")
	if theirs, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(leader), "ns", "mnt")); theirs == own || theirs == "" {
		t.Fatalf("the container's mount namespace %q is the host's %q", theirs, own)
	}
	if got := inNS(t, e.rt, s.InstanceID, "cat", filepath.Join(h.dst, "made")); got != "written\n" {
		t.Fatalf("a probe's command reads %q", got)
	}
	if code := execIn(t, e.rt, s.InstanceID, "test", "-f", filepath.Join(h.roDst, "setting")); code != 0 {
		t.Fatalf("exec does not see the volume: exit %d", code)
	}
	if code := execIn(t, e.rt, s.InstanceID, "touch", filepath.Join(h.roDst, "y")); code == 0 {
		t.Fatal("exec wrote to the read-only volume")
	}

	os.WriteFile(filepath.Join(h.root, "go"), nil, 0o600)
	if x := e.exit(s.InstanceID); x.ExitCode != 0 {
		t.Fatalf("exit = %+v", x)
	}
	log := logText(t, s.LogPath)
	for _, want := range []string{"from the volume", "from the read-only volume", "read-only"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "host-file") || strings.Contains(log, "writable") {
		t.Errorf("the container saw the host's directory or wrote the read-only volume:\n%s", log)
	}
	h.checkHostUntouched(t)
	if _, err := e.rt.MountNS(s.InstanceID); err == nil {
		t.Fatal("the mount namespace of an ended container opened")
	}
}

// The keeper makes the namespace on its forking thread and goes back:
// the next container, without mounts, runs in the host's namespace. A
// restarted daemon adopts the container and still execs in its view.
func TestKeeperVolumesSurviveADaemonRestart(t *testing.T) {
	h := newVolumeHost(t)
	e := newKeeperEnv(t, "", nil)
	s := e.keptSpec(h.script()...)
	s.Mounts = h.mounts()
	e.start(s)
	killAtCleanup(t, e.rt, s.InstanceID)
	plain := e.keptSpec("sleep", "1000")
	e.start(plain)
	killAtCleanup(t, e.rt, plain.InstanceID)
	own, _ := os.Readlink("/proc/self/ns/mnt")
	if ns, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(state(t, e.rt, plain.InstanceID).LeaderPid), "ns", "mnt")); ns != own {
		t.Fatalf("a container without mounts runs in %q, not the host's %q", ns, own)
	}
	waitFor(t, "the container to write through its mount", func() bool {
		_, err := os.Stat(filepath.Join(h.vol, "made"))
		return err == nil
	})

	rt2, byID := e.restarted(true)
	if r := byID[s.InstanceID]; !r.Alive {
		t.Fatalf("not adopted: %+v", r)
	}
	if got := inNS(t, rt2, s.InstanceID, "cat", filepath.Join(h.dst, "hello")); got != "from the volume\n" {
		t.Fatalf("after the restart a probe reads %q", got)
	}
	h.checkHostUntouched(t)
	os.WriteFile(filepath.Join(h.root, "go"), nil, 0o600)
	rt2.Kill(plain.InstanceID)
	for range 2 {
		select {
		case <-rt2.Exits():
		case <-time.After(10 * time.Second):
			t.Fatal("the adopted containers' exits never arrived")
		}
	}
	h.checkHostUntouched(t)
}

// A mountPath missing on the host when the shim mounts (it vanished after
// the daemon checked) fails the start, naming the container and the path;
// nothing is created on the host.
func TestMissingMountPathFailsTheStart(t *testing.T) {
	h := newVolumeHost(t)
	e := newEnv(t)
	s := e.spec("true")
	missingPath := filepath.Join(h.root, "host", "nope")
	s.Mounts = []shim.Mount{{Source: h.vol, Destination: missingPath}}
	_, err := e.rt.StartPlaced(s, nil)
	if err == nil || !strings.Contains(err.Error(), missingPath+" does not exist on the host") || !strings.Contains(err.Error(), `container "c"`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(missingPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the missing mountPath was made on the host: %v", err)
	}
	h.checkHostUntouched(t)
}

// The daemon refuses a container whose mountPath is missing before any
// process runs: it waits with CreateContainerError, naming the container,
// the volumeMount and the path, and says why.
func TestStartRefusesAMissingMountPath(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	os.Mkdir(vol, 0o755)
	rt, err := New(filepath.Join(dir, "containers"), []string{os.Args[0], "shim"}, runtime.Cgroups{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod()
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: filepath.Join(dir, "missing", "conf")}}
	var got runtime.Started
	rt.Start(&runtime.Container{Pod: pod, Spec: &pod.Spec.Containers[0], InstanceID: "u-1_app_1",
		Cgroup: func() (string, error) { return "", nil },
		VolumeMounts: func([]string) ([]runtime.Mount, error) {
			return []runtime.Mount{{Source: vol, Destination: filepath.Join(dir, "missing", "conf")}}, nil
		}}, func(s runtime.Started) { got = s })
	var ce *runtime.CreateError
	if !errors.As(got.Err, &ce) || ce.Reason != "CreateContainerError" {
		t.Fatalf("started = %+v, want a CreateContainerError", got)
	}
	for _, want := range []string{`container "app"`, `volumeMount "cfg"`, filepath.Join(dir, "missing", "conf") + " does not exist on the host", "creates nothing on the host"} {
		if !strings.Contains(ce.Message, want) {
			t.Errorf("message %q lacks %q", ce.Message, want)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "containers")); len(entries) > 0 {
		t.Fatalf("an instance was made: %v", entries)
	}
}

func TestCheckMountPaths(t *testing.T) {
	files := map[string]bool{"/srv": true, "/srv/app": true, "/etc/app.conf": false, "/vol": true, "/vol-file": false}
	stat := func(p string) (os.FileInfo, error) {
		dir, ok := files[p]
		if !ok {
			return nil, os.ErrNotExist
		}
		return fakeInfo{dir}, nil
	}
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "a"}, {Name: "b"}}}
	for _, tc := range []struct {
		name   string
		mounts []shim.Mount
		want   string
	}{
		{"existing", []shim.Mount{{Source: "/vol", Destination: "/srv/app"}, {Source: "/vol-file", Destination: "/etc/app.conf"}}, ""},
		{"inside another mount: the shim's to check", []shim.Mount{{Source: "/vol", Destination: "/srv/app"}, {Source: "/vol", Destination: "/srv/app/new"}}, ""},
		{"missing", []shim.Mount{{Source: "/vol", Destination: "/srv/app"}, {Source: "/vol", Destination: "/opt/x"}}, `container "app": volumeMount "b": mountPath /opt/x does not exist on the host`},
		{"file over a directory", []shim.Mount{{Source: "/vol-file", Destination: "/srv"}}, `volumeMount "a": mountPath /srv is a directory on the host, and the volume's subPath is a file`},
		{"directory over a file", []shim.Mount{{Source: "/vol", Destination: "/etc/app.conf"}}, "is not a directory on the host, and the volume is one"},
	} {
		err := checkMountPaths(c, tc.mounts, stat)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// Parents are mounted before what is mounted inside them, as CRI
// runtimes order mounts; the order is otherwise the pod's.
func TestVolumeMountsOrderParentsFirst(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "a/b", "c"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	c := &runtime.Container{Spec: &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "inner"}, {Name: "outer"}, {Name: "other"}}},
		VolumeMounts: func([]string) ([]runtime.Mount, error) {
			return []runtime.Mount{{Source: dir, Destination: filepath.Join(dir, "a/b/")}, {Source: dir, Destination: filepath.Join(dir, "a")},
				{Source: dir, Destination: filepath.Join(dir, "c"), ReadOnly: true}}, nil
		}}
	got, err := volumeMounts(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range got {
		order = append(order, strings.TrimPrefix(m.Destination, dir))
	}
	if want := []string{"/a", "/c", "/a/b"}; !slices.Equal(order, want) || !got[1].ReadOnly {
		t.Fatalf("mounts %v (%+v), want %v", order, got, want)
	}
}

type fakeInfo struct{ dir bool }

func (f fakeInfo) IsDir() bool  { return f.dir }
func (f fakeInfo) Name() string { return "" }
func (f fakeInfo) Size() int64  { return 0 }
func (f fakeInfo) Mode() os.FileMode {
	if f.dir {
		return os.ModeDir
	}
	return 0
}
func (f fakeInfo) ModTime() (t time.Time) { return t }
func (f fakeInfo) Sys() any               { return nil }

// A process pod whose mountPath is missing on the host is not admitted:
// it waits Pending, the container, volumeMount and path named, until the
// path exists.
func TestAdmitPodChecksMountPathsOnTheHost(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "srv"), 0o755)
	os.WriteFile(filepath.Join(dir, "app.conf"), nil, 0o644)
	rt := &Runtime{}
	pod := func(init, main []v1.VolumeMount) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", VolumeMounts: main}}}}
		if init != nil {
			p.Spec.InitContainers = []v1.Container{{Name: "setup", VolumeMounts: init}}
		}
		return p
	}
	at := func(p string) string { return filepath.Join(dir, p) }
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		want   string
		reason string
	}{
		{"existing", pod(nil, []v1.VolumeMount{{Name: "a", MountPath: at("srv")}, {Name: "b", MountPath: at("app.conf"), SubPath: "app.conf"}}), "", ""},
		{"inside another volume", pod(nil, []v1.VolumeMount{{Name: "a", MountPath: at("srv")}, {Name: "b", MountPath: at("srv/new")}}), "", ""},
		{"missing", pod(nil, []v1.VolumeMount{{Name: "a", MountPath: at("srv")}, {Name: "b", MountPath: at("opt/x")}}),
			`container "app": volumeMount "b": mountPath ` + at("opt/x") + " does not exist on the host", ReasonMountPathMissing},
		{"an init container's", pod([]v1.VolumeMount{{Name: "a", MountPath: at("nope")}}, nil), `container "setup": volumeMount "a"`, ReasonMountPathMissing},
		{"a whole volume over a file", pod(nil, []v1.VolumeMount{{Name: "a", MountPath: at("app.conf")}}), "is not a directory on the host, and the volume is one", ReasonMountPathInvalid},
	} {
		reason, msg := rt.AdmitPod(tc.pod)
		if reason != tc.reason || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: AdmitPod = %q, %q; want %q", tc.name, reason, msg, tc.want)
		}
	}
	if _, err := os.Stat(at("opt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("admission made a host directory: %v", err)
	}

	// A daemon that may not make mount namespaces refuses every process
	// pod with volumes, saying why; one without is admitted.
	defer func(f func() bool) { mountCapable = f }(mountCapable)
	mountCapable = func() bool { return false }
	if reason, msg := rt.AdmitPod(pod(nil, []v1.VolumeMount{{Name: "a", MountPath: at("srv")}})); reason != ReasonMountNamespaceUnavailable || !strings.Contains(msg, "CAP_SYS_ADMIN") {
		t.Errorf("without CAP_SYS_ADMIN: %q, %q", reason, msg)
	}
	if reason, _ := rt.AdmitPod(pod(nil, nil)); reason != "" {
		t.Errorf("a pod without volumes refused: %q", reason)
	}
}

// A container run as a user gets its namespace made by the root shim
// before it drops to that user: it reads its volume, and cannot undo a
// read-only mount.
func TestVolumesForAContainerRunAsAUser(t *testing.T) {
	h := newVolumeHost(t)
	for _, d := range []string{filepath.Dir(h.root), h.root} { // the test's temporary directories are root's alone
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnv(t)
	nobody := uint32(65534)
	s := e.spec("sh", "-c", "cat "+h.dst+"/hello; id -u; mount -o remount,rw "+h.roDst+" 2>/dev/null && echo remounted || echo refused")
	s.UID, s.GID = &nobody, &nobody
	s.Mounts = h.mounts()
	e.start(s)
	if x := e.exit(s.InstanceID); x.ExitCode != 0 {
		t.Fatalf("exit = %+v", x)
	}
	if log := logText(t, s.LogPath); !strings.Contains(log, "from the volume\n65534\nrefused\n") {
		t.Fatalf("log:\n%s", log)
	}
	h.checkHostUntouched(t)
}

// Across a keeper upgrade, the old keeper's container keeps its mount
// namespace (it is the container's, not the keeper's): the new daemon
// execs in it, while the new keeper makes its own containers theirs.
func TestKeeperUpgradeKeepsTheContainersNamespace(t *testing.T) {
	h := newVolumeHost(t)
	old := filepath.Join(t.TempDir(), "old-shim") // another version: the test binary with bytes appended
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, append(data, "old version"...), 0o700); err != nil {
		t.Fatal(err)
	}
	oldEnv := newKeeperEnv(t, "", []string{old, "shim"})
	before := oldEnv.keptSpec("sleep", "1000")
	before.Mounts = h.mounts()
	oldEnv.start(before)
	killAtCleanup(t, oldEnv.rt, before.InstanceID)

	e := newKeeperEnv(t, oldEnv.rt.dir, nil)
	e.n = 100
	if _, err := e.rt.Recover(); err != nil {
		t.Fatal(err)
	}
	after := e.keptSpec("sleep", "1000")
	after.Mounts = []shim.Mount{{Source: h.roVol, Destination: h.dst, ReadOnly: true}}
	e.start(after)
	killAtCleanup(t, e.rt, after.InstanceID)
	if state(t, e.rt, after.InstanceID).ShimPid == state(t, e.rt, before.InstanceID).ShimPid {
		t.Fatal("the new version started through the old keeper")
	}
	if got := inNS(t, e.rt, before.InstanceID, "cat", filepath.Join(h.dst, "hello")); got != "from the volume\n" {
		t.Fatalf("the old keeper's container: %q", got)
	}
	if got := inNS(t, e.rt, after.InstanceID, "cat", filepath.Join(h.dst, "setting")); got != "from the read-only volume\n" {
		t.Fatalf("the new keeper's container: %q", got)
	}
	for _, id := range []string{before.InstanceID, after.InstanceID} {
		e.rt.Kill(id)
		e.exit(id)
	}
	h.checkHostUntouched(t)
}
