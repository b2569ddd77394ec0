package conformance

// Ported from test/e2e/common/node/downwardapi.go ("Downward API").

import (
	"regexp"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Upstream's e2enetwork.RegexIPv4 and a looser RegexIPv6.
const (
	regexIPv4 = `(?:\d+)\.(?:\d+)\.(?:\d+)\.(?:\d+)`
	regexIPv6 = `[0-9a-fA-F]*:[0-9a-fA-F:]+`
)

func fieldEnv(name, path string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func resourceEnv(name, res string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: res}}}
}

// testContainerOutput is upstream's TestContainerOutputRegexp: the pod
// runs to Succeeded and its log matches every expression.
func testContainerOutput(e *env, p *v1.Pod, expectations []string) {
	e.t.Helper()
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	e.create(p)
	got := e.waitPod(p.Name, statusTimeout, "the pod succeeded or failed", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	if got.Status.Phase != v1.PodSucceeded {
		e.t.Fatalf("the pod did not succeed: %s\nlog of %s:\n%s", describe(got), p.Spec.Containers[0].Name, e.logs(got, p.Spec.Containers[0].Name))
	}
	log := e.logs(got, p.Spec.Containers[0].Name)
	for _, x := range expectations {
		if !regexp.MustCompile(x).MatchString(log) {
			e.t.Errorf("the log does not match %q:\n%s", x, log)
		}
	}
}

func downwardPod(name string, env []v1.EnvVar) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"name": name}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "dapi-container", Command: []string{"sh", "-c", "env"}, Env: env}}}}
}

// "should provide pod name, namespace and IP address as env vars [NodeConformance]" (Conformance)
func TestDownwardAPI_shouldProvidePodNameNamespaceAndIPAddressAsEnvVars(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		testContainerOutput(e, downwardPod("downward-api-name-ip", []v1.EnvVar{
			fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace"), fieldEnv("POD_IP", "status.podIP"),
		}), []string{"POD_NAME=downward-api-name-ip", "POD_NAMESPACE=default", "POD_IP=" + regexIPv4 + "|" + regexIPv6})
	})
}

// "should provide host IP as an env var [NodeConformance]" (Conformance)
func TestDownwardAPI_shouldProvideHostIPAsAnEnvVar(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		testContainerOutput(e, downwardPod("downward-api-host-ip", []v1.EnvVar{fieldEnv("HOST_IP", "status.hostIP")}),
			[]string{"HOST_IP=" + regexIPv4 + "|" + regexIPv6})
	})
}

// "should provide host IP and pod IP as an env var if pod uses host network [LinuxOnly]"
func TestDownwardAPI_shouldProvideHostIPAndPodIPAsAnEnvVarIfPodUsesHostNetwork(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := downwardPod("downward-api-host-network", []v1.EnvVar{fieldEnv("HOST_IP", "status.hostIP"), fieldEnv("POD_IP", "status.podIP")})
		p.Spec.HostNetwork = true
		testContainerOutput(e, p, []string{"HOST_IP=" + regexIPv4 + "|" + regexIPv6, "POD_IP=" + regexIPv4 + "|" + regexIPv6})
	})
}

// "should provide container's limits.cpu/memory and requests.cpu/memory as env vars [NodeConformance]" (Conformance)
func TestDownwardAPI_shouldProvideContainersLimitsAndRequestsAsEnvVars(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := downwardPod("downward-api-resources", []v1.EnvVar{resourceEnv("CPU_LIMIT", "limits.cpu"), resourceEnv("MEMORY_LIMIT", "limits.memory"),
			resourceEnv("CPU_REQUEST", "requests.cpu"), resourceEnv("MEMORY_REQUEST", "requests.memory")})
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1250m"), v1.ResourceMemory: resource.MustParse("64Mi")}}
		testContainerOutput(e, p, []string{"CPU_LIMIT=2", "MEMORY_LIMIT=67108864", "CPU_REQUEST=1", "MEMORY_REQUEST=33554432"})
	})
}

// "should provide default limits.cpu/memory from node allocatable [NodeConformance]" (Conformance)
func TestDownwardAPI_shouldProvideDefaultLimitsFromNodeAllocatable(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		testContainerOutput(e, downwardPod("downward-api-default-limits", []v1.EnvVar{resourceEnv("CPU_LIMIT", "limits.cpu"), resourceEnv("MEMORY_LIMIT", "limits.memory")}),
			[]string{"CPU_LIMIT=[1-9]", "MEMORY_LIMIT=[1-9]"})
	})
}

// "should provide pod UID as env vars [NodeConformance]" (Conformance)
func TestDownwardAPI_shouldProvidePodUIDAsEnvVars(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		testContainerOutput(e, downwardPod("downward-api-uid", []v1.EnvVar{fieldEnv("POD_UID", "metadata.uid")}),
			[]string{"POD_UID=[a-z0-9]{8}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{12}"})
	})
}

// "Downward API [Feature:PodHostIPs] should provide hostIPs as an env var"
func TestDownwardAPI_shouldProvideHostIPsAsAnEnvVar(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		testContainerOutput(e, downwardPod("downward-api-host-ips", []v1.EnvVar{fieldEnv("HOST_IPS", "status.hostIPs")}),
			[]string{"HOST_IPS=" + regexIPv4 + "|" + regexIPv6})
	})
}
