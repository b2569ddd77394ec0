package plugin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// shimsOf are the containerd-shim-runc-v2 processes of the containerd at
// address.
func shimsOf(address string) []int {
	var pids []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		data, err := os.ReadFile(f)
		argv := bytes.Split(data, []byte{0})
		if err != nil || !strings.HasSuffix(string(argv[0]), "containerd-shim-runc-v2") || !bytes.Contains(data, []byte("\x00"+address+"\x00")) {
			continue
		}
		// containerd also runs the shim's binary for a moment to start or
		// join a shim ("start") and to clean up after a task ("delete",
		// as when a parked container goes): those are not shims.
		if last := string(bytes.TrimRight(data, "\x00")); strings.HasSuffix(last, "\x00start") || strings.HasSuffix(last, "\x00delete") {
			continue
		}
		var pid int
		fmt.Sscan(filepath.Base(filepath.Dir(f)), &pid)
		pids = append(pids, pid)
	}
	return pids
}

// Containers with the same shim group share one containerd shim; another
// group gets its own. A container that joins after the group's first
// container is gone still finds the group's shim.
func TestShimGroupSharesOneShim(t *testing.T) {
	p, ctrd := newPlugin(t)
	importTestImage(t, p, "podvisor.test/busybox:1")
	dir := t.TempDir()
	for i := range 3 {
		run(t, p, fmt.Sprintf("g%d", i), "device-a", "sleep 1000", filepath.Join(dir, fmt.Sprint(i), "0.log"))
	}
	if shims := shimsOf(ctrd.Address); len(shims) != 1 {
		t.Fatalf("3 containers of one group run under %d shims %v, want 1", len(shims), shims)
	}
	run(t, p, "other", "device-b", "sleep 1000", filepath.Join(dir, "other", "0.log"))
	if shims := shimsOf(ctrd.Address); len(shims) != 2 {
		t.Fatalf("a second group: %d shims %v, want 2", len(shims), shims)
	}
	if err := p.Remove(pluginapi.IDArgs{ID: "g0"}, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	run(t, p, "g3", "device-a", "sleep 1000", filepath.Join(dir, "3", "0.log"))
	if shims := shimsOf(ctrd.Address); len(shims) != 2 {
		t.Fatalf("after the group's first container went and another joined: %d shims %v, want 2", len(shims), shims)
	}
	var st pluginapi.ExitStatus
	p.Signal(pluginapi.SignalArgs{ID: "g3", Signal: 9, All: true}, &pluginapi.Empty{})
	if err := p.Wait(pluginapi.IDArgs{ID: "g3"}, &st); err != nil || st.Signal != 9 {
		t.Fatalf("a grouped container's exit: %+v %v, want signal 9", st, err)
	}
}

// With a shim per pod, the ended task of the pod's last container is
// parked when the daemon removes it, so that the restarted container
// joins the pod's live shim; it goes once the new task runs, or when the
// pod is forgotten, and the shim with it.
func TestPodShimGroupKeepsItsShimAcrossARestart(t *testing.T) {
	p, ctrd := newPlugin(t)
	importTestImage(t, p, "podvisor.test/busybox:1")
	dir := t.TempDir()
	const pod = "pod-1"
	run(t, p, "a0", pod, "echo done; exit 1", filepath.Join(dir, "0.log"))
	var st pluginapi.ExitStatus
	if err := p.Wait(pluginapi.IDArgs{ID: "a0"}, &st); err != nil || st.ExitCode != 1 {
		t.Fatalf("exit %+v %v", st, err)
	}
	shims := shimsOf(ctrd.Address)
	if err := p.Remove(pluginapi.IDArgs{ID: "a0"}, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	if after := shimsOf(ctrd.Address); len(shims) != 1 || len(after) != 1 || after[0] != shims[0] {
		t.Fatalf("the pod's shim %v before its last task's removal, %v after: want the same one", shims, after)
	}
	var list pluginapi.ListReply
	if err := p.List(pluginapi.Empty{}, &list); err != nil || len(list.Containers) != 0 {
		t.Fatalf("a removed container is listed: %+v %v", list, err)
	}
	run(t, p, "a1", pod, "sleep 1000", filepath.Join(dir, "1.log"))
	if after := shimsOf(ctrd.Address); len(after) != 1 || after[0] != shims[0] {
		t.Fatalf("the restarted container runs under shims %v, want the pod's %v", after, shims)
	}
	waitFor(t, "the parked container to be deleted once the new task runs", func() bool {
		_, err := p.client.LoadContainer(p.ctx(), "a0")
		return err != nil
	})
	p.Signal(pluginapi.SignalArgs{ID: "a1", Signal: 9, All: true}, &pluginapi.Empty{})
	p.Wait(pluginapi.IDArgs{ID: "a1"}, &st)
	if err := p.Remove(pluginapi.IDArgs{ID: "a1"}, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	if err := p.ForgetShimGroup(pluginapi.GroupArgs{Group: pod}, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client.LoadContainer(p.ctx(), "a1"); err == nil {
		t.Fatal("the pod's parked container is kept after the pod was forgotten")
	}
	waitFor(t, "the pod's shim to exit once the pod is forgotten", func() bool { return len(shimsOf(ctrd.Address)) == 0 })
}
