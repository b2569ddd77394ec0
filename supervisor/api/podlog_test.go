package api

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/runtime/crilog"
)

// OpenLog refuses as the API server and the kubelet do, and reads with
// the options.
func TestOpenLog(t *testing.T) {
	web := testPod("web", "app")
	two := testPod("two", "a", "b")
	waiting := testPod("waiting", "app")
	waiting.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}
	f := newFake(web, two, waiting)
	path := filepath.Join(t.TempDir(), "0.log")
	os.WriteFile(path, []byte("2026-11-29T06:00:01Z stdout F one\n2026-11-29T06:00:02Z stdout F two\n"), 0o644)
	f.logs["web/app"] = LogRef{Path: path, Reader: criLogReader{}}
	for _, c := range []struct {
		pod  string
		req  LogRequest
		code int
		msg  string
	}{
		{"ghost", LogRequest{}, 404, `pods "ghost" not found`},
		{"two", LogRequest{}, 400, "a container name must be specified for pod two, choose one of: [a b]"},
		{"web", LogRequest{Container: "other"}, 400, "container other is not valid for pod web"},
		{"waiting", LogRequest{}, 400, `container "app" in pod "waiting" is waiting to start: ImagePullBackOff`},
	} {
		_, err := OpenLog(f, "default", c.pod, c.req)
		le, ok := err.(*LogError)
		if !ok || le.Code != c.code || le.Message != c.msg {
			t.Errorf("%s: %v, want %d %q", c.pod, err, c.code, c.msg)
		}
	}
	copyLog, err := OpenLog(f, "default", "web", LogRequest{Options: crilog.Options{TailLines: 1, Timestamps: true}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := copyLog(context.Background(), &out); err != nil || out.String() != "2026-11-29T06:00:02Z two\n" {
		t.Fatalf("%q %v", out.String(), err)
	}
}
