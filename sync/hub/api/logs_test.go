package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// scriptedLogs answers as a streamer would: it records the options and
// writes or refuses by pod.
type scriptedLogs struct{ got *v1.PodLogOptions }

func (s *scriptedLogs) PodLogs(_ context.Context, device, namespace, pod string, opts *v1.PodLogOptions, w io.Writer) error {
	s.got = opts
	switch pod {
	case "ghost":
		return apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, pod)
	case "late":
		io.WriteString(w, "partial\n")
		return apierrors.NewInternalError(io.ErrUnexpectedEOF)
	}
	_, err := io.WriteString(w, device+"/"+namespace+"/"+pod+"\n")
	return err
}

func TestLogRoute(t *testing.T) {
	logs := &scriptedLogs{}
	srv := httptest.NewServer((&API{Logs: logs}).Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	q := url.Values{"container": {"app"}, "follow": {"true"}, "tailLines": {"5"}, "sinceSeconds": {"60"}, "timestamps": {"true"}, "previous": {"false"}}
	if code, body := get("/v1/devices/gw-1/pods/default/web/log?" + q.Encode()); code != 200 || body != "gw-1/default/web\n" {
		t.Fatalf("%d %q", code, body)
	}
	if o := logs.got; o.Container != "app" || !o.Follow || !o.Timestamps || o.Previous || *o.TailLines != 5 || *o.SinceSeconds != 60 {
		t.Fatalf("options %+v", o)
	}
	if code, body := get("/v1/devices/gw-1/pods/default/ghost/log"); code != 404 || !strings.Contains(body, `pods \"ghost\" not found`) {
		t.Fatalf("%d %q", code, body)
	}
	if code, body := get("/v1/devices/gw-1/pods/default/late/log"); code != 200 || body != "partial\n" {
		t.Fatalf("an error after the first byte: %d %q", code, body)
	}
	if code, body := get("/v1/devices/gw-1/pods/default/web/log?tailLines=x"); code != 400 || !strings.Contains(body, "tailLines") {
		t.Fatalf("%d %q", code, body)
	}
}
