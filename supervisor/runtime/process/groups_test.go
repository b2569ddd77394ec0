package process

import (
	"os"
	"slices"
	"testing"

	"github.com/podvisor/podvisor/supervisor/runtime"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// A process container run as a user gets its fsGroup and
// supplementalGroups, in the kubelet's order, and, under a root daemon,
// none of the daemon's own groups.
func TestSupplementalGroups(t *testing.T) {
	pod := testPod()
	pod.Spec.SecurityContext.SupplementalGroups = []int64{20, 44}
	fsGroup := int64(1001)
	pod.Spec.SecurityContext.FSGroup = &fsGroup
	s, err := BuildSpec(pod, &pod.Spec.Containers[0], runtime.PodEnv{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Groups, []uint32{1001, 20, 44}) {
		t.Fatalf("groups = %v", s.Groups)
	}
	uid := uint32(1000)
	cred := shim.Credential(&uid, nil)
	if root := os.Getuid() == 0; cred.NoSetGroups == root {
		t.Fatalf("NoSetGroups = %v for a daemon with uid %d: root must set the groups, others cannot", cred.NoSetGroups, os.Getuid())
	}
}

// Containers get one default PATH whoever resolves it.
func TestDefaultPathIsTheShims(t *testing.T) {
	if runtime.DefaultPath != shim.DefaultPath {
		t.Fatalf("runtime.DefaultPath %q != shim.DefaultPath %q", runtime.DefaultPath, shim.DefaultPath)
	}
}
