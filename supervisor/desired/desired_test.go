package desired

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/priority"
)

// newPods is Pods with the built-in PriorityClasses, logging into the
// returned buffer.
func newPods(policy Policy) (*Pods, *bytes.Buffer) {
	var log bytes.Buffer
	s := New(Options{ManifestDir: "/m", Policy: policy, Log: slog.New(slog.NewTextHandler(&log, nil))})
	s.SetClasses(priority.Builtin())
	return s, &log
}

func keys(pods []*v1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return strings.Join(out, " ")
}

func TestNewConfiguresTheManifestDir(t *testing.T) {
	s := New(Options{ManifestDir: "/etc/podvisor/manifests", ManifestResync: time.Minute, ManifestSettle: time.Second, AllowUntrustedManifests: true})
	d := s.Dir()
	if d.Path != "/etc/podvisor/manifests" || d.Resync != time.Minute || d.Settle != time.Second || !d.AllowUntrusted {
		t.Fatalf("dir %+v", d)
	}
}

// A file pod the policy or the PriorityClasses refuse does not run: it
// becomes an invalid row of its file, and an event the first time only.
func TestSetFilesKeepsRejectedPodsAsInvalidRows(t *testing.T) {
	s, _ := newPods(Policy{ForbidPrivileged: true})
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	broken := manifest.Invalid{File: "/m/broken.yaml", Err: fmt.Errorf("line 3: bad"), Since: now.Add(-time.Hour)}
	st := manifest.State{
		Pods:    []*v1.Pod{pod("default", "web", "/m/web.yaml"), pod("default", "root", "/m/root.yaml", privileged), pod("default", "vip", "/m/vip.yaml", class("gold"))},
		Invalid: []manifest.Invalid{broken},
	}
	notes := s.SetFiles(st, now)

	rows := map[string]manifest.Invalid{}
	for _, r := range s.Invalid() {
		rows[r.File] = r
	}
	if len(rows) != 3 || rows["/m/broken.yaml"] != broken {
		t.Fatalf("invalid rows %+v, want broken.yaml as given, root.yaml and vip.yaml", s.Invalid())
	}
	for file, want := range map[string]string{"/m/root.yaml": "forbidPrivileged", "/m/vip.yaml": `pod "vip"`} {
		if r := rows[file]; r.Err == nil || !strings.Contains(r.Err.Error(), want) || !r.Since.Equal(now) {
			t.Errorf("%s: %+v, want an error containing %q since %s", file, r, want, now)
		}
	}
	if len(notes) != 3 {
		t.Fatalf("notes %+v, want one per invalid file", notes)
	}
	for _, n := range notes {
		if n.Type != "Warning" || n.Reason != "FailedValidation" {
			t.Errorf("note %+v", n)
		}
	}
	if again := s.SetFiles(st, now.Add(time.Second)); len(again) != 0 {
		t.Errorf("the same invalid files again: notes %+v, want none", again)
	}

	pods, ok := s.Desired()
	if !ok || keys(pods) != "default/web" {
		t.Fatalf("desired %s (ok %v), want default/web", keys(pods), ok)
	}
	if !s.Wants("default/web") || s.Wants("default/root") || s.Wants("default/other") {
		t.Errorf("Wants: web %v root %v other %v, want only web", s.Wants("default/web"), s.Wants("default/root"), s.Wants("default/other"))
	}
}

// The stored hub pods are desired as soon as the hub is expected, with
// the hub's identity; the file pod of the same name wins, and the hub
// pods given later replace them.
func TestHubPods(t *testing.T) {
	s, log := newPods(Policy{})
	if s.HubAttached() || s.Events() != nil {
		t.Fatal("a hub is attached before ExpectHub")
	}
	s.SetFiles(manifest.State{Pods: []*v1.Pod{pod("default", "web", "/m/web.yaml")}}, time.Time{})
	stored := pod("default", "db", "")
	s.ExpectHub(3, []*v1.Pod{stored, pod("default", "web", "")}, nil)
	if !s.HubAttached() || s.Events() == nil {
		t.Fatal("no hub attached after ExpectHub")
	}
	pods, ok := s.Desired()
	if !ok || keys(pods) != "default/web default/db" {
		t.Fatalf("desired %s, want default/web default/db", keys(pods))
	}
	if hub := pods[1]; hub.Annotations[manifest.AnnotationSource] != manifest.SourceHub || hub.UID == "" || stored.UID != "" {
		t.Errorf("hub pod %s source %q; the stored pod's UID %q: want a stamped copy", hub.UID, hub.Annotations[manifest.AnnotationSource], stored.UID)
	}
	if !strings.Contains(log.String(), "hub pod shadowed by a manifest file of the same name") {
		t.Errorf("the shadowed hub pod was not logged:\n%s", log)
	}
	// A deleted hub pod is started again, as a file pod is.
	if !s.Wants("default/db") || !s.Wants("default/web") || s.Wants("edge/cache") {
		t.Errorf("Wants: db %v web %v cache %v, want db and web", s.Wants("default/db"), s.Wants("default/web"), s.Wants("edge/cache"))
	}

	s.SetHub(4, []*v1.Pod{pod("edge", "cache", "")}, nil)
	if pods, _ := s.Desired(); keys(pods) != "default/web edge/cache" {
		t.Fatalf("desired %s after SetHub, want default/web edge/cache", keys(pods))
	}
	if s.Wants("default/db") || !s.Wants("edge/cache") {
		t.Errorf("Wants after SetHub: db %v cache %v, want only cache", s.Wants("default/db"), s.Wants("edge/cache"))
	}
	s.Retire()
	if s.Wants("edge/cache") {
		t.Error("Wants answers after Retire: nothing is started again")
	}
}

// Conflicts answers for a candidate set of hub pods without making it
// the hub's.
func TestConflicts(t *testing.T) {
	s, log := newPods(Policy{})
	s.SetFiles(manifest.State{Pods: []*v1.Pod{pod("default", "web", "/m/web.yaml")}}, time.Time{})
	s.ExpectHub(1, nil, nil)
	got := s.Conflicts([]*v1.Pod{pod("default", "web", ""), pod("default", "peek", "", hostPath), pod("default", "vip", "", class("gold")), pod("default", "ok", "")})
	want := map[string]string{"default/web": "/m/web.yaml", "default/peek": "hostPath", "default/vip": `no PriorityClass with name "gold"`}
	if len(got) != len(want) {
		t.Fatalf("conflicts %v, want %v", got, want)
	}
	for key, part := range want {
		if !strings.Contains(got[key], part) {
			t.Errorf("%s: %q, want it to contain %q", key, got[key], part)
		}
	}
	if !strings.Contains(log.String(), "hub pod refused by this device's policy") {
		t.Errorf("the policy's refusal was not logged:\n%s", log)
	}
	if pods, _ := s.Desired(); keys(pods) != "default/web" {
		t.Errorf("desired %s after Conflicts, want the file pod alone", keys(pods))
	}
}

// Once retired, nothing is desired again, whatever the sources say.
func TestRetire(t *testing.T) {
	s, _ := newPods(Policy{})
	s.SetFiles(manifest.State{Pods: []*v1.Pod{pod("default", "web", "/m/web.yaml")}}, time.Time{})
	s.Retire()
	s.SetHub(2, []*v1.Pod{pod("default", "db", "")}, nil)
	if pods, ok := s.Desired(); ok || pods != nil {
		t.Fatalf("desired %s (ok %v) once retired, want nothing to apply", keys(pods), ok)
	}
}

// Pod events wait for the hub in a bounded queue that drops the newest;
// without a hub they go nowhere.
func TestQueueEvent(t *testing.T) {
	s, _ := newPods(Policy{})
	s.QueueEvent(PodEvent{Pod: "default/web", Reason: "Started"}) // no hub: dropped
	s.ExpectHub(1, nil, nil)
	for i := range podEventQueue + 1 {
		s.QueueEvent(PodEvent{Pod: "default/web", Reason: fmt.Sprint(i)})
	}
	events := s.Events()
	if n := len(events); n != podEventQueue {
		t.Fatalf("%d events queued, want %d", n, podEventQueue)
	}
	if first := <-events; first.Reason != "0" {
		t.Errorf("first event %+v, want the first one queued after ExpectHub", first)
	}
}
