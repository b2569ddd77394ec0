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

// run starts a container of the test image with script as its command,
// in pod pod-<id> unless the group names "pod-…".
func run(t *testing.T, p *Plugin, id, group, script, logPath string) {
	t.Helper()
	pod := "pod-" + id
	if strings.HasPrefix(group, "pod-") {
		pod = group
	}
	cfg := pluginapi.ContainerConfig{ID: id, Labels: map[string]string{pluginapi.LabelInstance: id, pluginapi.LabelPodUID: pod}, Image: "podvisor.test/busybox:1",
		PullPolicy: "Never", Command: []string{"sh", "-c", script}, ShimGroup: group, LogPath: logPath, LogMaxBytes: 1 << 20, LogMaxFiles: 2}
	var reply pluginapi.RunReply
	if err := p.Run(pluginapi.RunArgs{Config: cfg}, &reply); err != nil || reply.Failure != nil {
		t.Fatalf("run %s: %v %+v", id, err, reply.Failure)
	}
	t.Cleanup(func() { p.Remove(pluginapi.IDArgs{ID: id}, &pluginapi.Empty{}) })
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

	q, err := New(Config{Address: ctrd.Address, RuncRoot: ctrd.RuncRoot(), FIFODir: p.cfg.FIFODir}, slog.Default())
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
	if entries, _ := os.ReadDir(q.cfg.FIFODir); len(entries) != 0 {
		t.Errorf("the removed container's FIFOs are left in %s: %v", q.cfg.FIFODir, entries)
	}
}
