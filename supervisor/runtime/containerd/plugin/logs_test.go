package plugin

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		var pid int
		fmt.Sscan(filepath.Base(filepath.Dir(f)), &pid)
		pids = append(pids, pid)
	}
	return pids
}

// run starts a container of the test image with script as its command.
func run(t *testing.T, p *Plugin, id, group, script, logPath string) {
	t.Helper()
	cfg := pluginapi.ContainerConfig{ID: id, Labels: map[string]string{pluginapi.LabelInstance: id}, Image: "podvisor.test/busybox:1",
		PullPolicy: "Never", Command: []string{"sh", "-c", script}, ShimGroup: group, LogPath: logPath, LogMaxBytes: 1 << 20, LogMaxFiles: 2}
	var reply pluginapi.RunReply
	if err := p.Run(pluginapi.RunArgs{Config: cfg}, &reply); err != nil || reply.Failure != nil {
		t.Fatalf("run %s: %v %+v", id, err, reply.Failure)
	}
	t.Cleanup(func() { p.Remove(pluginapi.IDArgs{ID: id}, &pluginapi.Empty{}) })
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

// A restarted plugin re-opens the FIFOs of the containers that still run:
// what they print after the restart reaches their logs, and no process
// per container writes them.
func TestRestartedPluginReopensFIFOs(t *testing.T) {
	p, ctrd := newPlugin(t)
	importTestImage(t, p, "podvisor.test/busybox:1")
	logPath := filepath.Join(t.TempDir(), "0.log")
	run(t, p, "talker", "device-a", "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.05; done", logPath)
	waitFor(t, "the log to hold line 3", func() bool { b, _ := os.ReadFile(logPath); return strings.Contains(string(b), " stdout F line 3\n") })
	p.Close() // the plugin stops reading; the container blocks once the FIFO is full
	stopped, _ := os.ReadFile(logPath)

	q, err := New(Config{Address: ctrd.Address, RuncRoot: ctrd.RuncRoot()}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	waited := make(chan pluginapi.ExitStatus, 1)
	go func() {
		var st pluginapi.ExitStatus
		q.Wait(pluginapi.IDArgs{ID: "talker"}, &st) // as the daemon resumes its waits
		waited <- st
	}()
	waitFor(t, "the log to grow by 10 lines after the plugin's restart", func() bool {
		b, _ := os.ReadFile(logPath)
		return bytes.Count(b, []byte("\n")) >= bytes.Count(stopped, []byte("\n"))+10
	})
	if err := q.Signal(pluginapi.SignalArgs{ID: "talker", Signal: 9, All: true}, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-waited:
		if st.Signal != 9 {
			t.Fatalf("exit %+v, want signal 9", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s of SIGKILL")
	}
	b, _ := os.ReadFile(logPath)
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if want := fmt.Sprintf(" stdout F line %d", i); !strings.HasSuffix(line, want) {
			t.Fatalf("log line %d is %q, want it to end in %q: a line was lost or repeated across the restart", i, line, want)
		}
	}
	entries, _ := os.ReadDir(FIFODir)
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(FIFODir, e.Name(), "talker-stdout")); err == nil {
			t.Errorf("the ended container's FIFOs are left in %s", e.Name())
		}
	}
}
