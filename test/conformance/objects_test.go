package conformance

// What the ConfigMap, Secret and projected volume ports share: objects
// given as a static pod's manifest directory gives them (documents in a
// manifest file; create, update and delete are writing, rewriting and
// removing the file), upstream's agnhost mounttest pods, and the mount
// paths of process pods.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// nonRootTestUserID is upstream's setPodNonRootUser uid.
const nonRootTestUserID = int64(1000)

// podLogTimeout stands for upstream's GetPodSecretUpdateTimeout (the
// kubelet's sync period and cache TTL, minutes): podvisor rewrites a
// volume when the manifest directory's objects change. mounttestRetry is
// the --retry_time the looping mounttest containers get: longer than any
// wait, as upstream's.
const (
	podLogTimeout  = statusTimeout
	mounttestRetry = "--retry_time=120"
)

var uniqueN atomic.Int64

// unique is a name of upstream's form (prefix + a UUID) that no other
// test of the run uses: the objects and pods of a node share a namespace.
func unique(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, uniqueN.Add(1))
}

// vol is a test's view for pods with volumes. Upstream's mount paths
// (/etc/configmap-volume, …) are root+path: root is "" on containerd; a
// process pod's volume goes at its mountPath in the container's own mount
// namespace, and that path must exist on the host, so its pods get a
// directory of the test's own as root and the paths below it are made.
type vol struct {
	*env
	root string
}

func (e *env) vol() *vol {
	v := &vol{env: e}
	if e.process() {
		v.root = e.hostDir()
	}
	return v
}

// p is where the pod sees upstream's path.
func (v *vol) p(path string) string { return v.root + path }

// prepare makes a process pod's mountPaths on the host.
func (v *vol) prepare(p *v1.Pod) {
	v.t.Helper()
	if v.root == "" {
		return
	}
	for _, c := range append(append([]v1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if err := os.MkdirAll(m.MountPath, 0o755); err != nil {
				v.t.Fatal(err)
			}
		}
	}
}

// create is env.create for a pod with volumes.
func (v *vol) create(p *v1.Pod) {
	v.t.Helper()
	if p.Namespace == "" {
		p.Namespace = "default" // as the daemon takes it; for the logs and events
	}
	v.prepare(p)
	v.env.create(p)
}

// output is upstream's TestContainerOutputRegexp.
func (v *vol) output(p *v1.Pod, expectations []string) {
	v.t.Helper()
	v.prepare(p)
	testContainerOutput(v.env, p, expectations)
}

// outputContains is upstream's TestContainerOutput: substrings.
func (v *vol) outputContains(p *v1.Pod, expectations []string) {
	v.t.Helper()
	quoted := make([]string, len(expectations))
	for i, x := range expectations {
		quoted[i] = regexp.QuoteMeta(x)
	}
	v.output(p, quoted)
}

// createSync is upstream's PodClient.CreateSync: created and running.
func (v *vol) createSync(p *v1.Pod) {
	v.t.Helper()
	v.create(p)
	got := v.waitPod(p.Name, statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	p.Namespace = got.Namespace
}

// eventuallyLog is upstream's Eventually(GetPodLogs).Should(ContainSubstring).
func (v *vol) eventuallyLog(p *v1.Pod, container, substr string) {
	v.t.Helper()
	v.waitLog(p, container, podLogTimeout, fmt.Sprintf("containing %q", substr), func(s string) bool { return strings.Contains(s, substr) })
}

// mounttest runs the suite's agnhost mounttest with upstream's args.
func (e *env) mounttest(args ...string) []string {
	return e.agnhostCommand(append([]string{"mounttest"}, args...)...)
}

// agnhostPod is upstream's e2epod.NewAgnhostPod running mounttest, as
// createConfigMapVolumeMounttestPod builds it: container
// agnhost-container, restartPolicy Never.
func (e *env) agnhostPod(name string, volumes []v1.Volume, mounts []v1.VolumeMount, args ...string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			Volumes:         volumes,
			SecurityContext: &v1.PodSecurityContext{},
			RestartPolicy:   v1.RestartPolicyNever,
			Containers:      []v1.Container{{Name: "agnhost-container", Command: e.mounttest(args...), VolumeMounts: mounts}},
		}}
}

// createMounts is upstream's: one mount.
func createMounts(volumeName, volumeMountPath string, readOnly bool) []v1.VolumeMount {
	return []v1.VolumeMount{{Name: volumeName, MountPath: volumeMountPath, ReadOnly: readOnly}}
}

// setPodNonRootUser is upstream's (Linux): uid 1000.
func setPodNonRootUser(p *v1.Pod) {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &v1.PodSecurityContext{}
	}
	p.Spec.SecurityContext.RunAsUser = ptr(nonRootTestUserID)
}

// getFileModeRegex is upstream's: what mounttest --file_mode prints for
// mask (0644 when nil), or its Windows form.
func getFileModeRegex(filePath string, mask *int32) string {
	linuxMask, windowsMask := int32(0o644), int32(0o775)
	if mask != nil {
		linuxMask, windowsMask = *mask, *mask
	}
	linuxOutput := fmt.Sprintf("mode of file \"%s\": %v", filePath, os.FileMode(linuxMask))
	windowsOutput := fmt.Sprintf("mode of Windows file \"%v\": %s", filePath, os.FileMode(windowsMask))
	return fmt.Sprintf("(%s|%s)", linuxOutput, windowsOutput)
}

// newConfigMap is upstream's: data-1..3 = value-1..3.
func newConfigMap(name string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Data: map[string]string{"data-1": "value-1", "data-2": "value-2", "data-3": "value-3"}}
}

// secretForTest is upstream's: data-1..3 = "value-1\n"…
func secretForTest(namespace, name string) *v1.Secret {
	return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Data: map[string][]byte{"data-1": []byte("value-1\n"), "data-2": []byte("value-2\n"), "data-3": []byte("value-3\n")}}
}

// putObjects is the API server's create or update: the ConfigMaps and
// Secrets become the documents of manifest file obj-<file>.yaml,
// replacing what it held (written whole, then renamed into place). The
// file is removed when the test ends.
func (e *env) putObjects(file string, objs ...any) {
	e.t.Helper()
	var docs []string
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.ConfigMap:
			o.APIVersion, o.Kind = "v1", "ConfigMap"
		case *v1.Secret:
			o.APIVersion, o.Kind = "v1", "Secret"
		default:
			e.t.Fatalf("putObjects: %T is no ConfigMap or Secret", o)
		}
		b, err := yaml.Marshal(o)
		if err != nil {
			e.t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	path := e.objectsFile(file)
	tmp := filepath.Join(e.n.manifests(), "."+filepath.Base(path)+".tmp")
	// 0600: a file holding Secrets that others may read gets a warning.
	if err := os.WriteFile(tmp, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		e.t.Fatal(err)
	}
	fresh := !exists(path)
	if err := os.Rename(tmp, path); err != nil {
		e.t.Fatal(err)
	}
	if fresh {
		e.t.Cleanup(func() { os.Remove(path) })
	}
}

// deleteObjects is the API server's delete of the objects of a file.
func (e *env) deleteObjects(file string) {
	e.t.Helper()
	if err := os.Remove(e.objectsFile(file)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) objectsFile(file string) string {
	return filepath.Join(e.n.manifests(), "obj-"+file+".yaml")
}

// consistentlyPending is upstream's Consistently(BeInPhase(Pending)) of
// the non-optional tests, over d (upstream: the pod start timeout,
// 5 min). It first waits for the kubelet's FailedMount warning naming
// what is missing, so the daemon is known to have tried the volume.
func (v *vol) consistentlyPending(p *v1.Pod, missing string, d time.Duration) {
	v.t.Helper()
	for end := time.Now().Add(statusTimeout); ; time.Sleep(200 * time.Millisecond) {
		found := false
		for _, ev := range v.events(p) {
			found = found || ev.Reason == "FailedMount" && strings.Contains(ev.Message, missing)
		}
		if found {
			break
		}
		if time.Now().After(end) {
			v.t.Fatalf("pod %s: no FailedMount event naming %q within %v: %+v", p.Name, missing, statusTimeout, v.events(p))
		}
	}
	v.consistently(p.Name, d, "phase Pending", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodPending })
}
