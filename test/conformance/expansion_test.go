package conformance

// Ported from test/e2e/common/node/expansion.go ("Variable Expansion").

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func expansionPod(name string, env []v1.EnvVar, command, args []string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"name": name}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "dapi-container", Command: command, Args: args, Env: env}}}}
}

// "should allow composing env vars into new env vars [NodeConformance]" (Conformance)
func TestVariableExpansion_shouldAllowComposingEnvVarsIntoNewEnvVars(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		testContainerOutput(e, expansionPod("var-expansion-compose", []v1.EnvVar{{Name: "FOO", Value: "foo-value"}, {Name: "BAR", Value: "bar-value"},
			{Name: "FOOBAR", Value: "$(FOO);;$(BAR)"}}, []string{"sh", "-c", "env"}, nil),
			[]string{"FOO=foo-value", "BAR=bar-value", "FOOBAR=foo-value;;bar-value"})
	})
}

// "should allow substituting values in a container's command [NodeConformance]" (Conformance)
func TestVariableExpansion_shouldAllowSubstitutingValuesInAContainersCommand(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		testContainerOutput(e, expansionPod("var-expansion-command", []v1.EnvVar{{Name: "TEST_VAR", Value: "test-value"}},
			[]string{"sh", "-c", "TEST_VAR=wrong echo \"$(TEST_VAR)\""}, nil), []string{"test-value"})
	})
}

// "should allow substituting values in a container's args [NodeConformance]" (Conformance)
func TestVariableExpansion_shouldAllowSubstitutingValuesInAContainersArgs(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		testContainerOutput(e, expansionPod("var-expansion-args", []v1.EnvVar{{Name: "TEST_VAR", Value: "test-value"}},
			[]string{"sh", "-c"}, []string{"TEST_VAR=wrong echo \"$(TEST_VAR)\""}), []string{"test-value"})
	})
}

// Below, process pods' mountPaths lie in a directory of the test's own
// (vol.p): a process pod's mountPath must exist on the host.

// "should allow substituting values in a volume subpath" (Conformance)
func TestVariableExpansion_shouldAllowSubstitutingValuesInAVolumeSubpath(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		p := expansionPod("var-expansion-subpath", []v1.EnvVar{fieldEnv("POD_NAME", "metadata.name")},
			[]string{"sh", "-c", "test -d " + v.p("/testcontainer/var-expansion-subpath") + ";echo $?"}, nil)
		p.Spec.Volumes = []v1.Volume{{Name: "workdir1", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "workdir1", MountPath: v.p("/logscontainer"), SubPathExpr: "$(POD_NAME)"},
			{Name: "workdir1", MountPath: v.p("/testcontainer")}}
		v.output(p, []string{"0"})
	})
}

// testPodFailSubpath is upstream's: the container never starts and waits
// with CreateContainerConfigError.
func testPodFailSubpath(e *vol, p *v1.Pod) {
	e.t.Helper()
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	e.create(p)
	e.waitPod(p.Name, statusTimeout, "the container waiting with CreateContainerConfigError", func(p *v1.Pod) bool {
		w := status0(p).State.Waiting
		return w != nil && w.Reason == "CreateContainerConfigError"
	})
}

func subpathPod(v *vol, name, expr string) *v1.Pod {
	p := expansionPod(name, []v1.EnvVar{fieldEnv("POD_NAME", "metadata.name")}, []string{"sh", "-c"}, []string{"sleep 100000"})
	p.Spec.TerminationGracePeriodSeconds = ptr(int64(2))
	p.Spec.Volumes = []v1.Volume{{Name: "workdir1", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "workdir1", MountPath: v.p("/logscontainer"), SubPathExpr: expr}}
	return p
}

// "should fail substituting values in a volume subpath with backticks [Slow]" (Conformance)
func TestVariableExpansion_shouldFailSubstitutingValuesInAVolumeSubpathWithBackticks(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		p := subpathPod(v, "var-expansion-backticks", "$(POD_NAME)")
		p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "POD_NAME", Value: ".."}} // upstream's value, despite the name
		testPodFailSubpath(v, p)
	})
}

// "should fail substituting values in a volume subpath with absolute path [Slow]" (Conformance)
func TestVariableExpansion_shouldFailSubstitutingValuesInAVolumeSubpathWithAbsolutePath(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		v := e.vol()
		p := subpathPod(v, "var-expansion-absolute", "$(POD_NAME)")
		p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "POD_NAME", Value: "/tmp"}}
		testPodFailSubpath(v, p)
	})
}
