package containerd

import (
	"io"
	"log/slog"
	"net/rpc"
	"net/rpc/jsonrpc"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// writeAtomic writes a file whole through a rename: a reader polling for
// it sees either no file or all of it, never the empty file that
// os.WriteFile leaves between its create and its write.
func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// The test binary doubles as a fake plugin: Wait returns once a file
// names the container's exit code.
func TestMain(m *testing.M) {
	if dir := os.Getenv("PODVISOR_FAKE_PLUGIN"); dir != "" {
		if err := writeAtomic(filepath.Join(dir, "pid"), strconv.Itoa(os.Getpid())); err != nil {
			panic(err)
		}
		srv := rpc.NewServer()
		srv.RegisterName(pluginapi.Service, &fakePlugin{dir: dir})
		srv.ServeCodec(jsonrpc.NewServerCodec(struct {
			io.Reader
			io.Writer
			io.Closer
		}{os.Stdin, os.Stdout, os.Stdin}))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type fakePlugin struct{ dir string }

func (f *fakePlugin) Version(_ pluginapi.Empty, r *pluginapi.VersionReply) error {
	r.Version = "fake"
	return nil
}

func (f *fakePlugin) Wait(a pluginapi.IDArgs, st *pluginapi.ExitStatus) error {
	for {
		// Only a whole number is an exit code: anything else (an empty
		// or partial file) is not yet, never exit 0.
		data, err := os.ReadFile(filepath.Join(f.dir, a.ID+".exit"))
		if code, perr := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && perr == nil {
			st.ExitCode = int32(code)
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A plugin that dies is restarted and every wait resumes: the container
// is not reported gone, and its real exit arrives afterwards.
func TestWaitsSurviveAPluginRestart(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PODVISOR_FAKE_PLUGIN", dir)
	c := NewClient([]string{os.Args[0], "-test.run=^$"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !c.Start(5 * time.Second) {
		t.Fatal("the fake plugin did not connect")
	}
	defer c.Close()
	c.Watch("c1", "uid_app_1")
	pid := func() int {
		data, _ := os.ReadFile(filepath.Join(dir, "pid"))
		n, _ := strconv.Atoi(string(data))
		return n
	}
	first := pid()
	if first <= 0 { // kill(0) would signal the test's own process group
		t.Fatalf("the fake plugin's pid file holds no pid")
	}
	syscall.Kill(first, syscall.SIGKILL)
	select {
	case <-c.Connected(): // the first connection's signal
	case <-time.After(5 * time.Second):
	}
	deadline := time.Now().Add(5 * time.Second)
	for (pid() == first || pid() <= 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if now := pid(); now == first || now <= 0 {
		t.Fatalf("the plugin was not restarted within 5s (pid file: %d, first plugin %d)", now, first)
	}
	select {
	case x := <-c.Exits():
		t.Fatalf("an exit was reported for a container that still runs: %+v", x)
	case <-time.After(300 * time.Millisecond):
	}
	if err := writeAtomic(filepath.Join(dir, "c1.exit"), "7"); err != nil {
		t.Fatal(err)
	}
	select {
	case x := <-c.Exits():
		if x.InstanceID != "uid_app_1" || x.ExitCode != 7 {
			t.Fatalf("exit %+v, want uid_app_1 with code 7", x)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit reported within 5s of the container's exit file being written")
	}
}

func TestContainerID(t *testing.T) {
	short := "0123abcd-0000-1111-2222-333344445555_app_3"
	if got := ContainerID(short); got != short {
		t.Fatalf("a valid instance ID was changed: %s", got)
	}
	long := "0123abcd-0000-1111-2222-333344445555_" + strings.Repeat("x", 60) + "_3"
	got := ContainerID(long)
	if len(got) > 76 || !validID.MatchString(got) || got != ContainerID(long) || got == ContainerID(long+"0") {
		t.Fatalf("long ID %q: want a stable, valid, distinct ID of at most 76 characters", got)
	}
}
