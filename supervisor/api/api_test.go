package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/supervisor/runtime/crilog"
)

// fakeBackend serves fixed pods; publish bumps the version like the daemon.
type fakeBackend struct {
	mu      sync.Mutex
	pods    []*v1.Pod
	version uint64
	changed chan struct{}
	logs    map[string]LogRef
	deleted []string
	gates   map[string]bool
}

func (f *fakeBackend) Delete(ns, name string, grace *int64, force bool) (DeleteResult, error) {
	g := "default"
	if grace != nil {
		g = fmt.Sprint(*grace)
	}
	f.deleted = append(f.deleted, fmt.Sprintf("%s/%s grace=%s force=%v", ns, name, g, force))
	return DeleteResult{Source: "file", Recreated: true}, nil
}

func (f *fakeBackend) Node() (*v1.Node, error) {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dev1"}}, nil
}

func (f *fakeBackend) Stats() ([]PodStats, error) {
	return []PodStats{{Namespace: "default", Name: "web", Usage: Usage{CPUNanos: 5, MemoryWorkingSet: 7, Tasks: 1}}}, nil
}

func (f *fakeBackend) Drain(string) error { return nil }
func (f *fakeBackend) Uncordon() error    { return nil }

func (f *fakeBackend) SetCondition(ns, name string, typ v1.PodConditionType, status bool) error {
	if f.gates == nil {
		f.gates = map[string]bool{}
	}
	f.gates[name+"/"+string(typ)] = status
	return nil
}

func newFake(pods ...*v1.Pod) *fakeBackend {
	return &fakeBackend{pods: pods, version: 1, changed: make(chan struct{}), logs: map[string]LogRef{}}
}

func (f *fakeBackend) Pods() ([]*v1.Pod, uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods, f.version, f.changed
}

func (f *fakeBackend) publish(pods ...*v1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
	f.version++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeBackend) Events(ns, name string) []Event {
	return []Event{{Type: "Normal", Reason: "Started", Message: ns + "/" + name, Count: 1}}
}

func (f *fakeBackend) Log(ns, name, container string, previous bool) (LogRef, error) {
	ref, ok := f.logs[name+"/"+container]
	if !ok {
		return ref, errors.New("no such log")
	}
	return ref, nil
}

func testPod(name string, containers ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c})
	}
	return p
}

func serve(t *testing.T, b Backend) *Client {
	sock := filepath.Join(t.TempDir(), "api.sock")
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Backend: b, Version: Version{Version: "test"}}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, sock) }()
	t.Cleanup(func() { cancel(); <-done })
	c := NewClient(sock)
	for i := 0; ; i++ {
		if _, err := c.Version(context.Background()); err == nil {
			return c
		}
		if i > 500 {
			t.Fatal("server did not come up")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestListGetAndErrors(t *testing.T) {
	c := serve(t, newFake(testPod("web", "app")))
	list, err := c.Pods(context.Background())
	if err != nil || len(list.Items) != 1 || list.Kind != "PodList" || list.ResourceVersion != "1" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	p, err := c.Pod(context.Background(), "default", "web")
	if err != nil || p.Name != "web" {
		t.Fatalf("pod = %v, %v", p, err)
	}
	_, err = c.Pod(context.Background(), "default", "nope")
	if err == nil || err.Error() != `pod "nope" not found in namespace "default"` {
		t.Fatalf("missing pod error = %v", err)
	}
	ev, err := c.Events(context.Background(), "default", "web")
	if err != nil || len(ev) != 1 || ev[0].Message != "default/web" {
		t.Fatalf("events = %v, %v", ev, err)
	}
}

func TestWatchWaitsForANewerVersion(t *testing.T) {
	f := newFake(testPod("a", "c"))
	c := serve(t, f)
	got := make(chan int, 1)
	go func() {
		list, err := c.WatchPods(context.Background(), 1)
		if err != nil {
			got <- -1
			return
		}
		got <- len(list.Items)
	}()
	select {
	case n := <-got:
		t.Fatalf("watch returned before a change (%d pods)", n)
	case <-time.After(50 * time.Millisecond):
	}
	f.publish(testPod("a", "c"), testPod("b", "c"))
	select {
	case n := <-got:
		if n != 2 {
			t.Fatalf("watch saw %d pods, want 2", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not return after a change")
	}
	// An old version returns at once.
	if list, err := c.WatchPods(context.Background(), 0); err != nil || len(list.Items) != 2 {
		t.Fatalf("watch from 0: %v %v", list, err)
	}
}

func TestLogNeedsContainerWhenSeveral(t *testing.T) {
	f := newFake(testPod("multi", "a", "b"))
	path := filepath.Join(t.TempDir(), "1.log")
	os.WriteFile(path, []byte("2026-01-01T00:00:00Z stdout F hello\n2026-01-01T00:00:00Z stdout P par\n2026-01-01T00:00:00Z stdout F tial\n"), 0o644)
	f.logs["multi/b"] = LogRef{Path: path, Reader: criLogReader{}}
	c := serve(t, f)
	var out bytes.Buffer
	err := c.Log(context.Background(), "default", "multi", "", false, false, &out)
	if err == nil || !strings.Contains(err.Error(), "choose one with -c") {
		t.Fatalf("err = %v", err)
	}
	if err := c.Log(context.Background(), "default", "multi", "b", false, false, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "hello\npartial\n" {
		t.Fatalf("log = %q", out.String())
	}
}

func TestClientWithoutDaemon(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "absent.sock"))
	_, err := c.Pods(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no podvisor daemon is listening") {
		t.Fatalf("err = %v", err)
	}
}

func TestDeleteAndConditions(t *testing.T) {
	f := newFake(testPod("web", "app"))
	c := serve(t, f)
	ctx := context.Background()
	five, zero := int64(5), int64(0)
	if res, err := c.Delete(ctx, "default", "web", &five, false); err != nil || !res.Recreated {
		t.Fatalf("delete: %+v %v", res, err)
	}
	if _, err := c.Delete(ctx, "default", "web", nil, true); err == nil || !strings.Contains(err.Error(), "force requires gracePeriod=0") {
		t.Fatalf("force without grace 0: %v", err)
	}
	if _, err := c.Delete(ctx, "default", "web", &zero, true); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.deleted, "; "); got != "default/web grace=5 force=false; default/web grace=0 force=true" {
		t.Fatalf("backend saw %q", got)
	}
	if st, err := c.Stats(ctx); err != nil || len(st) != 1 || st[0].Usage.MemoryWorkingSet != 7 {
		t.Fatalf("stats: %+v %v", st, err)
	}
	if err := c.SetCondition(ctx, "default", "web", "example.com/lb", true); err != nil || !f.gates["web/example.com/lb"] {
		t.Fatalf("set condition: %v %v", err, f.gates)
	}
}

// criLogReader reads logs as the runtimes do (runtime.LogReader).
type criLogReader struct{}

func (criLogReader) CopyLog(out io.Writer, path string) error { return crilog.Copy(out, path) }
func (criLogReader) FollowLog(ctx context.Context, out io.Writer, path string, ended <-chan struct{}) error {
	return crilog.Follow(ctx, out, path, ended)
}
