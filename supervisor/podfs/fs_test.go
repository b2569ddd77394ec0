package podfs

import (
	"errors"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/test/prereq"
)

// newTestFS is a pod file system under a fresh data directory.
func newTestFS(t *testing.T, allowedHostPaths ...string) *FS {
	t.Helper()
	return New(Options{DataDir: t.TempDir(), AllowedHostPaths: allowedHostPaths, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

var testNode = runtime.PodEnv{NodeName: "dev", HostIP: "192.0.2.7",
	Allocatable: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}

// testPod is a pod with the given volumes and one container, app, that
// mounts them. HostIPC spares it a /dev/shm tmpfs, which needs root.
func testPod(volumes []v1.Volume, mounts []v1.VolumeMount) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1", Labels: map[string]string{"app": "web", "tier": "edge"}},
		Spec: v1.PodSpec{HostIPC: true, Volumes: volumes,
			HostAliases: []v1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"broker"}}},
			Containers:  []v1.Container{{Name: "app", VolumeMounts: mounts}}},
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A start prepares every volume in the pod's directory and mounts them
// with the pod's hosts and hostname files after them.
func TestMountsPreparesVolumesAndPodFiles(t *testing.T) {
	prereq.Root(t, "mounting the tmpfs of downwardAPI and projected volumes")
	fs := newTestFS(t)
	hostDir := filepath.Join(t.TempDir(), "host", "made")
	labels := v1.DownwardAPIVolumeFile{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}
	namespace := v1.DownwardAPIVolumeFile{Path: "ns", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}
	pod := testPod([]v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir + "/", Type: hostPathType(v1.HostPathDirectoryOrCreate)}}},
		{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{labels}}}},
		{Name: "proj", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{namespace}}}}}}},
	}, []v1.VolumeMount{
		{Name: "scratch", MountPath: "/scratch"},
		{Name: "host", MountPath: "/host", ReadOnly: true},
		{Name: "info", MountPath: "/info"},
		{Name: "proj", MountPath: "/proj"},
	})
	t.Cleanup(func() { fs.RemovePod(pod.UID) })
	got, err := fs.MountsFor(pod, &pod.Spec.Containers[0], testNode)(nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(fs.dataDir, "pods", "uid-1")
	want := []runtime.Mount{
		{Source: filepath.Join(dir, "volumes", "scratch"), Destination: "/scratch"},
		{Source: hostDir, Destination: "/host", ReadOnly: true},
		{Source: filepath.Join(dir, "volumes", "info"), Destination: "/info", ReadOnly: true},
		{Source: filepath.Join(dir, "volumes", "proj"), Destination: "/proj", ReadOnly: true},
		{Source: filepath.Join(dir, "hosts"), Destination: "/etc/hosts"},
		{Source: filepath.Join(dir, "hostname"), Destination: "/etc/hostname"},
	}
	if _, err := os.Stat("/etc/resolv.conf"); err == nil {
		want = append(want, runtime.Mount{Source: "/etc/resolv.conf", Destination: "/etc/resolv.conf", ReadOnly: true})
	}
	if len(got) != len(want) {
		t.Fatalf("mounts:\n%v\nwant:\n%v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mount %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "volumes", "scratch")); err != nil || st.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir: %v, %v (want a directory any container user may write)", st, err)
	}
	if st, err := os.Stat(hostDir); err != nil || !st.IsDir() {
		t.Errorf("hostPath DirectoryOrCreate not made: %v", err)
	}
	if got := readFile(t, filepath.Join(dir, "volumes", "info", "labels")); got != "app=\"web\"\ntier=\"edge\"\n" {
		t.Errorf("downwardAPI labels %q", got)
	}
	if got := readFile(t, filepath.Join(dir, "volumes", "proj", "ns")); got != "default" {
		t.Errorf("projected namespace %q", got)
	}
	if got := readFile(t, filepath.Join(dir, "hostname")); got != "web\n" {
		t.Errorf("hostname file %q", got)
	}
	hosts := readFile(t, filepath.Join(dir, "hosts"))
	if !strings.HasPrefix(hosts, managedHostsHeader) || !strings.Contains(hosts, podIPPlaceholder+"\tweb\n") || !strings.Contains(hosts, "10.1.2.3\tbroker\n") {
		t.Errorf("hosts file %q", hosts)
	}

	fs.RemovePod(pod.UID)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("pod directory left: %v", err)
	}
	if _, err := os.Stat(hostDir); err != nil {
		t.Fatalf("removing the pod removed its hostPath: %v", err)
	}
}

// A container that sees the host's root gets its volume mounts alone:
// no hosts, hostname, resolv.conf or /dev/shm is made or mounted for it
// (a process pod, whose pod does not say hostIPC).
func TestVolumeMountsAlone(t *testing.T) {
	fs := newTestFS(t)
	info := v1.DownwardAPIVolumeFile{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}
	pod := testPod([]v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{info}}}},
	}, []v1.VolumeMount{{Name: "scratch", MountPath: "/srv/scratch"}, {Name: "info", MountPath: "/etc/podinfo"}})
	pod.Spec.HostIPC = false
	got, err := fs.VolumeMountsFor(pod, &pod.Spec.Containers[0], testNode)(nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(fs.dataDir, "pods", "uid-1")
	want := []runtime.Mount{
		{Source: filepath.Join(dir, "volumes", "scratch"), Destination: "/srv/scratch"},
		{Source: filepath.Join(dir, "volumes", "info"), Destination: "/etc/podinfo", ReadOnly: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("mounts %+v, want %+v", got, want)
	}
	for _, f := range []string{"hosts", "hostname", "shm"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s made for a container that sees the host's: %v", f, err)
		}
	}
	fs.RemovePod(pod.UID)
}

// A container that mounts a volume at /etc/hosts keeps it, as with the
// kubelet.
func TestMountsKeepsContainersOwnHosts(t *testing.T) {
	fs := newTestFS(t)
	pod := testPod([]v1.Volume{{Name: "etc", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
		[]v1.VolumeMount{{Name: "etc", MountPath: "/etc/hosts"}})
	got, err := fs.Mounts(pod, &pod.Spec.Containers[0], testNode, nil)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, m := range got {
		if m.Destination == "/etc/hosts" {
			hosts = append(hosts, m.Source)
		}
	}
	if len(hosts) != 1 || filepath.Base(hosts[0]) != "etc" {
		t.Fatalf("/etc/hosts mounted from %v, want the container's volume only", hosts)
	}
}

func TestMountsRefusals(t *testing.T) {
	base := t.TempDir()
	allowed, elsewhere := filepath.Join(base, "allowed"), filepath.Join(base, "elsewhere")
	for _, tc := range []struct {
		name    string
		volume  v1.VolumeSource
		mount   string // the volume the container mounts
		wantErr string
	}{
		{"no such volume", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}, "other", `volumeMount "other": no such volume`},
		{"unsupported", v1.VolumeSource{NFS: &v1.NFSVolumeSource{}}, "v", `volume "v": unsupported volume source`},
		{"outside the allowed host paths", v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: elsewhere}}, "v",
			"hostPath " + elsewhere + " is outside the host paths this device allows (" + allowed + ")"},
		{"host path type", v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: filepath.Join(allowed, "missing"), Type: hostPathType(v1.HostPathDirectory)}}, "v",
			"hostPath " + filepath.Join(allowed, "missing") + ": "},
		{"downward item without a reference", v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{{Path: "x"}}}}, "v",
			`MountVolume.SetUp failed for volume "v" : a fieldRef or resourceFieldRef is required`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newTestFS(t, allowed)
			pod := testPod([]v1.Volume{{Name: "v", VolumeSource: tc.volume}}, []v1.VolumeMount{{Name: tc.mount, MountPath: "/v"}})
			_, err := fs.Mounts(pod, &pod.Spec.Containers[0], testNode, nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// Without security.allowedHostPaths a hostPath's type is checked as the
// kubelet does, following links.
func TestCheckHostPath(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o644)
	os.Symlink(base, filepath.Join(base, "link"))
	for _, tc := range []struct {
		path    string
		typ     v1.HostPathType
		wantErr string
	}{
		{file, v1.HostPathUnset, ""},
		{file, v1.HostPathFile, ""},
		{file, v1.HostPathDirectory, "hostPath type check failed: " + file + " is not a Directory"},
		{filepath.Join(base, "link"), v1.HostPathDirectory, ""},
		{filepath.Join(base, "missing"), v1.HostPathFile, "is not a File"},
		{filepath.Join(base, "made", "dir"), v1.HostPathDirectoryOrCreate, ""},
		{filepath.Join(base, "made-file"), v1.HostPathFileOrCreate, ""},
	} {
		err := checkHostPath(&v1.HostPathVolumeSource{Path: tc.path, Type: hostPathType(tc.typ)})
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s (%s): %v", tc.path, tc.typ, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s (%s): error %v, want %q", tc.path, tc.typ, err, tc.wantErr)
		}
	}
	if st, err := os.Stat(filepath.Join(base, "made", "dir")); err != nil || !st.IsDir() {
		t.Errorf("DirectoryOrCreate: %v", err)
	}
	if st, err := os.Stat(filepath.Join(base, "made-file")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("FileOrCreate: %v", err)
	}
}

// A host-network pod's hostname is the device's, and its hosts file the
// device's own under the kubelet's header.
func TestPodFilesHostNetwork(t *testing.T) {
	fs := newTestFS(t)
	pod := testPod(nil, nil)
	pod.Spec.HostNetwork = true
	if _, err := fs.Mounts(pod, &pod.Spec.Containers[0], testNode, nil); err != nil {
		t.Fatal(err)
	}
	dir := fs.podDir(pod.UID)
	host, _ := os.Hostname()
	if got := readFile(t, filepath.Join(dir, "hostname")); got != host+"\n" {
		t.Errorf("hostname file %q, want the device's %q", got, host)
	}
	// A device without a hosts file of its own gives the managed one.
	want := string(managedHostsFile([]string{podIPPlaceholder}, host, pod.Spec.HostAliases))
	switch node, err := os.ReadFile(etcHosts); {
	case err == nil:
		want = string(nodeHostsFile(node, pod.Spec.HostAliases))
	case !errors.Is(err, iofs.ErrNotExist):
		t.Fatalf("reading the device's %s: %v", etcHosts, err)
	}
	if got := readFile(t, filepath.Join(dir, "hosts")); got != want {
		t.Errorf("hosts file %q, want %q", got, want)
	}
}

// A subPath is created when missing, resolved without links and handed
// to the runtime as a bind of what was resolved; removing the pod
// unmounts it and its /dev/shm, and leaves the volume's files to the
// volume.
func TestMountsStagesSubPaths(t *testing.T) {
	prereq.Root(t, "bind-mounting subPaths and mounting /dev/shm")
	fs := newTestFS(t)
	outside := t.TempDir()
	pod := testPod([]v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
		[]v1.VolumeMount{{Name: "data", MountPath: "/logs", SubPathExpr: "logs/$(POD_NAME)"}})
	pod.Spec.HostIPC = false
	c := &pod.Spec.Containers[0]
	c.Env = []v1.EnvVar{{Name: "POD_NAME", Value: "web"}}
	t.Cleanup(func() { fs.RemovePod(pod.UID) }) // before TempDir's cleanup: no mount left under it
	got, err := fs.Mounts(pod, c, testNode, []string{"POD_NAME=web"})
	if err != nil {
		t.Fatal(err)
	}
	dir := fs.podDir(pod.UID)
	staged := filepath.Join(dir, stagedMountsDir, "data", "app", "0")
	if got[0] != (runtime.Mount{Source: staged, Destination: "/logs"}) {
		t.Fatalf("subPath mount %+v, want the staged bind %s", got[0], staged)
	}
	if err := os.WriteFile(filepath.Join(staged, "out.log"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	inVolume := filepath.Join(dir, "volumes", "data", "logs", "web", "out.log")
	if _, err := os.Stat(inVolume); err != nil {
		t.Fatalf("the staged bind is not the volume's subPath: %v", err)
	}
	if last := got[len(got)-1]; last.Destination != "/dev/shm" || !isMountPoint(last.Source) {
		t.Fatalf("last mount %+v, want the pod's mounted /dev/shm", last)
	}

	// A link a container planted in the volume is not followed.
	os.Symlink(outside, filepath.Join(dir, "volumes", "data", "escape"))
	c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: "data", MountPath: "/escape", SubPath: "escape"})
	_, err = fs.Mounts(pod, c, testNode, []string{"POD_NAME=web"})
	if want := `failed to prepare subPath for volumeMount "data" of container "app"`; err == nil || err.Error() != want {
		t.Fatalf("subPath through a link: error %v, want %q", err, want)
	}

	fs.RemovePod(pod.UID)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("pod directory left: %v", err)
	}
}

// A memory-backed emptyDir is a tmpfs of its size limit, mounted once
// however many containers start.
func TestMemoryEmptyDir(t *testing.T) {
	prereq.Root(t, "mounting tmpfs")
	fs := newTestFS(t)
	limit := resource.MustParse("1Mi")
	pod := testPod([]v1.Volume{{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &limit}}}},
		[]v1.VolumeMount{{Name: "mem", MountPath: "/mem"}})
	t.Cleanup(func() { fs.RemovePod(pod.UID) })
	for range 2 {
		if _, err := fs.Mounts(pod, &pod.Spec.Containers[0], testNode, nil); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(fs.podDir(pod.UID), "volumes", "mem")
	if !isMountPoint(dir) {
		t.Fatal("memory emptyDir not mounted")
	}
	var found []string
	for _, line := range strings.Split(readFile(t, "/proc/self/mounts"), "\n") {
		if fields := strings.Fields(line); len(fields) > 3 && fields[1] == dir && fields[2] == "tmpfs" {
			found = append(found, fields[3])
		}
	}
	if len(found) != 1 {
		t.Fatalf("tmpfs mounted %d times at %s", len(found), dir)
	}
	for _, opt := range []string{"nosuid", "nodev", "size=1024k"} {
		if !strings.Contains(","+found[0]+",", ","+opt+",") {
			t.Errorf("tmpfs options %s, want %s among them", found[0], opt)
		}
	}
	fs.RemovePod(pod.UID)
	if isMountPoint(dir) {
		t.Fatal("tmpfs left mounted")
	}
}
