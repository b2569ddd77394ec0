package kubeapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/logstream"
	"github.com/podvisor/podvisor/sync/protocol"
)

// t0 is the fixture's "now": devices were heard from a second before.
var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fixture is a real fleet database in a temporary directory, with
// devices reporting through the same calls the device link makes.
type fixture struct {
	t     *testing.T
	fleet *fleetdb.Fleet
	api   *Server
	srv   *httptest.Server
	mu    sync.Mutex
	now   time.Time
	seq   map[string]int64
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	return newFixtureOn(t, fleet, cfg)
}

// newFixtureOn is newFixture on a fleet the test opened.
func newFixtureOn(t *testing.T, fleet *fleetdb.Fleet, cfg Config) *fixture {
	t.Helper()
	f := &fixture{t: t, fleet: fleet, now: t0, seq: map[string]int64{}}
	cfg.Fleet, cfg.Workloads = fleet, workloaddb.New(fleet.SQL())
	cfg.Now = f.clock
	if cfg.Resync == 0 {
		cfg.Resync = time.Hour // the tests re-read nodes themselves
	}
	if cfg.Version == "" {
		cfg.Version = "v1.37.2-podhub"
	}
	f.api = New(cfg)
	f.srv = httptest.NewServer(f.api)
	t.Cleanup(func() { f.srv.Close(); f.api.Close() })
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// device enrols a device that is online and reports a Ready node.
func (f *fixture) device(id string, labels map[string]string) {
	f.t.Helper()
	if err := f.fleet.AddDevice(id); err != nil {
		f.t.Fatal(err)
	}
	if len(labels) > 0 {
		if err := f.fleet.SetLabels(id, labels); err != nil {
			f.t.Fatal(err)
		}
	}
	at := f.clock().Add(-time.Second)
	if _, err := f.fleet.SavePresence(id, &protocol.Presence{Online: true, Instance: "i-" + id}, at); err != nil {
		f.t.Fatal(err)
	}
	node := v1.NodeStatus{
		Capacity:    v1.ResourceList{v1.ResourceCPU: apiresource.MustParse("4"), v1.ResourceMemory: apiresource.MustParse("2Gi")},
		Allocatable: v1.ResourceList{v1.ResourceCPU: apiresource.MustParse("4"), v1.ResourceMemory: apiresource.MustParse("1900Mi")},
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			Message: "podvisor is posting ready status", LastHeartbeatTime: metav1.NewTime(at), LastTransitionTime: metav1.NewTime(at.Add(-time.Hour))}},
		Addresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: id}, {Type: v1.NodeInternalIP, Address: "192.0.2.10"}},
		NodeInfo: v1.NodeSystemInfo{OSImage: "Debian GNU/Linux 12 (bookworm)", KernelVersion: "6.1.0-28-amd64",
			ContainerRuntimeVersion: "podvisor://1.0", KubeletVersion: "v1.37.2-podvisor", OperatingSystem: "linux", Architecture: "amd64"},
	}
	if _, _, err := f.fleet.SaveHeartbeat(&protocol.Heartbeat{Device: id, Time: at, Version: "1.0.0", Node: node, Instance: "i-" + id}, at); err != nil {
		f.t.Fatal(err)
	}
}

// filePod is a running pod of a device's manifest directory.
func filePod(name string, restarts int32) *v1.Pod {
	start := metav1.NewTime(t0.Add(-10 * time.Minute))
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-file-" + name), CreationTimestamp: start,
			Labels: map[string]string{"app": name}, Annotations: map[string]string{manifest.AnnotationSource: manifest.SourceFile,
				// As podvisor reports a manifest file's pod: its config hash
				// (the mirror pod's kubernetes.io/config.mirror) beside its UID.
				manifest.AnnotationHash: "hash-file-" + name}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "busybox"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.5", StartTime: &start,
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "main", Ready: true, RestartCount: restarts,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: start}}}}},
	}
}

// report sends a device's status items as one batch.
func (f *fixture) report(device string, items ...protocol.StatusItem) {
	f.t.Helper()
	after := f.seq[device]
	for i := range items {
		f.seq[device]++
		items[i].Seq = f.seq[device]
	}
	if _, err := f.fleet.StoreStatus(&protocol.StatusBatch{Device: device, Epoch: "e1", After: after, Items: items}, f.clock()); err != nil {
		f.t.Fatal(err)
	}
}

func podItem(p *v1.Pod) protocol.StatusItem {
	return protocol.StatusItem{Key: p.Namespace + "/" + p.Name, Pod: p}
}

func eventItem(key, typ, reason, message string, at time.Time) protocol.StatusItem {
	return protocol.StatusItem{Key: key, Event: &protocol.Event{Time: at, Type: typ, Reason: reason, Message: message}}
}

// get fetches a path with an Accept header, returning status and body.
func (f *fixture) get(path, accept string) (int, []byte) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// getJSON fetches a path that must answer 200 and decodes it.
func (f *fixture) getJSON(path, accept string, into any) {
	f.t.Helper()
	code, b := f.get(path, accept)
	if code != http.StatusOK {
		f.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, into); err != nil {
		f.t.Fatalf("GET %s: %v in %s", path, err, b)
	}
}

// eventually waits (at most 10 s) for cond, naming what it waited for.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// podNames lists the pods' names the API serves at path.
func (f *fixture) podNames(path string) string {
	var list v1.PodList
	f.getJSON(path, "", &list)
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return strings.Join(names, " ")
}

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

// goneItem is a status item saying a pod left its device.
func goneItem(key string) protocol.StatusItem { return protocol.StatusItem{Key: key} }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// The remote logs' streamer is what serve.go hands New as Logs.
var _ Logs = (*logstream.Streamer)(nil)
