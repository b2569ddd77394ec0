package containerd

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// TeardownNetwork waits until the test allows it (a file), and records
// that it ran.
func (f *fakePlugin) TeardownNetwork(a pluginapi.NetworkArgs, _ *pluginapi.Empty) error {
	for {
		if _, err := os.Stat(filepath.Join(f.dir, a.PodUID+".allow")); err == nil {
			return writeAtomic(filepath.Join(f.dir, a.PodUID+".detached"), a.NetNS)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A pod that is gone is detached from the network off the caller (the
// daemon's loop), its record kept until then; a start of the same pod
// waits for it.
func TestForgetPodDetachesInTheBackground(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	t.Setenv("PODVISOR_FAKE_PLUGIN", dir)
	r := New(Config{}, data, runtime.Cgroups{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.client = NewClient([]string{os.Args[0], "-test.run=^$"}, r.log)
	if !r.client.Start(5 * time.Second) {
		t.Fatal("the fake plugin did not connect")
	}
	defer r.Close()
	uid := types.UID("0123abcd-0000-1111-2222-333344445555")
	os.MkdirAll(r.podDir(uid), 0o755)
	if err := os.WriteFile(filepath.Join(r.podDir(uid), networkFile), []byte(`{"ips":["10.0.0.2"],"netns":"/ns/net"}`), 0o644); err != nil {
		t.Fatal(err)
	}

	returned := make(chan struct{})
	go func() { r.ForgetPod(uid); close(returned) }()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("ForgetPod waited for the network's teardown")
	}
	os.RemoveAll(r.podDir(uid)) // as the daemon does next
	record := filepath.Join(r.detachDir(), string(uid)+".json")
	if _, err := os.Stat(record); err != nil {
		t.Fatalf("the network record is not kept while the pod is detached: %v", err)
	}
	started := make(chan struct{})
	go func() { r.awaitForgotten(uid); close(started) }()
	select {
	case <-started:
		t.Fatal("a start of the same pod did not wait for its old network to go")
	case <-time.After(100 * time.Millisecond):
	}

	if err := os.WriteFile(filepath.Join(dir, string(uid)+".allow"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the start still waits after the pod was detached")
	}
	if got, err := os.ReadFile(filepath.Join(dir, string(uid)+".detached")); err != nil || string(got) != "/ns/net" {
		t.Fatalf("teardown got netns %q (%v), want /ns/net", got, err)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Fatalf("the network record outlived the detach: %v", err)
	}
}

// A record left by a daemon that stopped mid-detach is detached at the
// next start.
func TestLeftDetachesResumeAtStart(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	t.Setenv("PODVISOR_FAKE_PLUGIN", dir)
	r := New(Config{}, data, runtime.Cgroups{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	uid := "0123abcd-0000-1111-2222-333344445555"
	os.MkdirAll(r.detachDir(), 0o700)
	record := filepath.Join(r.detachDir(), uid+".json")
	os.WriteFile(record, []byte(`{"netns":"/ns/left"}`), 0o600)
	os.WriteFile(filepath.Join(dir, uid+".allow"), nil, 0o644)
	r.client = NewClient([]string{os.Args[0], "-test.run=^$"}, r.log)
	if !r.client.Start(5 * time.Second) {
		t.Fatal("the fake plugin did not connect")
	}
	r.resumeDetaches()
	r.Close() // waits for it
	if got, err := os.ReadFile(filepath.Join(dir, uid+".detached")); err != nil || string(got) != "/ns/left" {
		t.Fatalf("teardown got netns %q (%v), want /ns/left", got, err)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Fatalf("the network record outlived the detach: %v", err)
	}
}
