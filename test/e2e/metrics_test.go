package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
)

// The shipped daemon serves /metrics on metrics.listen (a unix socket
// here): three running process pods are kubelet_running_pods 3, in an
// exposition Prometheus' parser takes; the kubelet's split paths answer.
func TestMetricsListener(t *testing.T) {
	d := newDaemon(t)
	sock := filepath.Join(d.dir, "metrics.sock")
	d.withConfig("metrics: {listen: \"unix:" + sock + "\"}\n")
	d.start()
	for i := range 3 {
		d.write(fmt.Sprintf("web%d.yaml", i), processPod(fmt.Sprintf("web%d", i), "Always", 2, "exec sleep 1000"))
	}
	for i := range 3 {
		d.waitPod(fmt.Sprintf("web%d", i), 20*time.Second, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	get := func(path string) []byte {
		t.Helper()
		resp, err := client.Get("http://metrics" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
		}
		return body
	}
	// The loop publishes after the step that made the pods Running; a
	// scrape reads the last publication, so look until it shows them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		body := get("/metrics")
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("Prometheus' parser refused /metrics: %v\n%s", err, body)
		}
		running := fams["kubelet_running_pods"].GetMetric()
		if len(running) == 1 && running[0].GetGauge().GetValue() == 3 {
			if fams["podvisor_build_info"] == nil || fams["kubelet_started_containers_total"] == nil {
				t.Errorf("families missing:\n%s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet_running_pods never reached 3 within 10s:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if body := get("/metrics/probes"); strings.Contains(string(body), "kubelet_") {
		t.Errorf("/metrics/probes holds kubelet_ families:\n%s", body)
	}
	if body := get("/metrics/resource"); !strings.Contains(string(body), "# TYPE node_cpu_usage_seconds_total counter") {
		t.Errorf("/metrics/resource has no node_cpu_usage_seconds_total:\n%s", body)
	}
}

// A metrics listener on a non-loopback address without a token is
// refused before the daemon starts anything.
func TestMetricsListenRefusedWithoutToken(t *testing.T) {
	d := newDaemon(t)
	stderr, code := d.runOnce("--metrics-listen", "0.0.0.0:10255")
	if code != 1 || !strings.Contains(stderr, "metrics.listen") || !strings.Contains(stderr, "bearerTokenFile") {
		t.Errorf("exit %d, stderr %q: want exit 1 naming metrics.listen and bearerTokenFile", code, stderr)
	}
	if exists(d.data) || exists(d.socket) {
		t.Error("a refused metrics listener made the data directory or the socket")
	}
}
