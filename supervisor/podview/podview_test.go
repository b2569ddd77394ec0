package podview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// countingMachine counts the views built from the machine.
type countingMachine struct {
	*lifecycle.Machine
	built map[types.UID]int
}

func (m *countingMachine) PodView(in *lifecycle.Instance, now time.Time) *v1.Pod {
	m.built[in.UID()]++
	return m.Machine.PodView(in, now)
}

func webPod(name, uid string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{Name: "app", Image: "host"}}},
	}
}

func testView() *View {
	return New(Options{NodeName: "dev", HostIP: "192.0.2.1",
		LogPath: func(p *v1.Pod, c string, n int) string {
			return filepath.Join("/logs", string(p.UID), c, strconv.Itoa(n)+".log")
		},
		RuntimeOf: func(*v1.Pod) runtime.Runtime { return nil }})
}

// step runs one Ready as the daemon does (every Start answered at once)
// and publishes it.
func step(v *View, m *countingMachine, now time.Time, src Sources) {
	rd := m.Ready(now)
	m.Advance(rd)
	for _, a := range rd.Actions {
		if a.Kind == lifecycle.Start {
			m.Started(a.Pod, a.Container, a.InstanceID, now)
		}
	}
	v.Publish(m, now, rd.Changed, src)
}

func none(string) bool { return false }

// Only the pods a Ready names as changed are built anew; the others are
// served from the views already built.
func TestPublishRebuildsOnlyChangedPods(t *testing.T) {
	m := &countingMachine{Machine: lifecycle.NewMachine(lifecycle.DefaultConfig()), built: map[types.UID]int{}}
	m.SetDesired([]*v1.Pod{webPod("a", "ua"), webPod("b", "ub")})
	v := testView()
	if _, version, _ := v.Pods(); version != 0 {
		t.Fatalf("version %d before the first publish", version)
	}
	step(v, m, t0, Sources{Desired: none})
	step(v, m, t0, Sources{Desired: none}) // the starts answered
	pods, version, changed := v.Pods()
	if len(pods) != 2 || version != 2 || pods[0].Status.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("published %d pods, version %d: %+v", len(pods), version, pods)
	}
	if p := pods[0]; p.Spec.NodeName != "dev" || p.Status.HostIP != "192.0.2.1" || p.Status.PodIP != "" {
		t.Fatalf("node %q hostIP %q podIP %q: want the device's, and no pod IP without a runtime", p.Spec.NodeName, p.Status.HostIP, p.Status.PodIP)
	}
	before := fmt.Sprint(m.built)
	in := m.Instance("ub")
	m.Exited("ub", "app", lifecycle.Termination{InstanceID: in.Container("app").InstanceID, ExitCode: 1, FinishedAt: t0})
	step(v, m, t0.Add(time.Second), Sources{Desired: none})
	select {
	case <-changed:
	default:
		t.Fatal("readers were not woken by the publish")
	}
	if m.built["ua"] != 2 || m.built["ub"] != 3 {
		t.Fatalf("views built %v after %s: want only ub's built again", m.built, before)
	}
	pods, _, _ = v.Pods()
	if rc := pods[1].Status.ContainerStatuses[0].RestartCount; rc != 1 {
		t.Fatalf("restartCount %d, want the new view of ub", rc)
	}
}

// Logs are indexed by container, with the attempt lastState shows as
// previous; a rejected manifest file is a row of its own.
func TestPublishLogsAndInvalidRows(t *testing.T) {
	m := &countingMachine{Machine: lifecycle.NewMachine(lifecycle.DefaultConfig()), built: map[types.UID]int{}}
	m.SetDesired([]*v1.Pod{webPod("a", "ua")})
	v := testView()
	src := Sources{Desired: none, Invalid: []manifest.Invalid{{File: "/etc/podvisor/bad.yaml", Err: errors.New("no containers"), Since: t0}}}
	step(v, m, t0, src)
	m.Exited("ua", "app", lifecycle.Termination{InstanceID: m.Instance("ua").Container("app").InstanceID, ExitCode: 1, FinishedAt: t0})
	step(v, m, t0, src)
	ref, err := v.Log("default", "a", "app", false)
	if err != nil || ref.Path != "/logs/ua/app/2.log" || !ref.Running {
		t.Fatalf("current log %+v, %v", ref, err)
	}
	if ref, err = v.Log("default", "a", "app", true); err != nil || ref.Path != "/logs/ua/app/1.log" {
		t.Fatalf("previous log %+v, %v", ref, err)
	}
	if _, err := v.Log("default", "a", "other", false); err == nil || !strings.Contains(err.Error(), "has not started") {
		t.Fatalf("unknown container: %v", err)
	}
	pods, _, _ := v.Pods()
	if len(pods) != 2 || pods[1].Name != "bad.yaml" || pods[1].Status.Reason != StatusInvalid ||
		pods[1].Status.Message != "/etc/podvisor/bad.yaml: no containers" {
		t.Fatalf("rows %+v: want the pod, then the rejected file", pods)
	}
}

// A repeated event counts up; each pod keeps its newest maxEvents.
func TestRecordFoldsRepeatsAndKeepsTheNewest(t *testing.T) {
	v := testView()
	v.Record(Note{"default/a", "Warning", "BackOff", "back-off"}, t0)
	v.Record(Note{"default/a", "Warning", "BackOff", "back-off"}, t0.Add(time.Second))
	evs := v.Events("default", "a")
	if len(evs) != 1 || evs[0].Count != 2 || !evs[0].LastTime.Equal(t0.Add(time.Second)) || !evs[0].FirstTime.Equal(t0) {
		t.Fatalf("events %+v: want one counted twice", evs)
	}
	for i := range maxEvents + 5 {
		v.Record(Note{"default/a", "Normal", "Started", fmt.Sprint(i)}, t0)
	}
	evs = v.Events("default", "a")
	if len(evs) != maxEvents || evs[len(evs)-1].Message != fmt.Sprint(maxEvents+4) {
		t.Fatalf("%d events, last %q", len(evs), evs[len(evs)-1].Message)
	}
}

// A file rejected anew is noted on its row and on the pods it still runs;
// one rejected for the same reason as before is not noted again.
func TestNewlyInvalid(t *testing.T) {
	kept := webPod("web", "u")
	kept.Annotations = map[string]string{manifest.AnnotationFile: "/m/web.yaml"}
	old := manifest.State{}
	cur := manifest.State{Pods: []*v1.Pod{kept}, Invalid: []manifest.Invalid{{File: "/m/web.yaml", Err: errors.New("bad port")}}}
	notes := NewlyInvalid(old, cur)
	if len(notes) != 2 || notes[0].Key != "default/web.yaml" || notes[1].Key != "default/web" ||
		notes[1].Message != "/m/web.yaml: bad port (still running the last valid version)" {
		t.Fatalf("notes %+v", notes)
	}
	if again := NewlyInvalid(cur, cur); len(again) != 0 {
		t.Fatalf("noted again: %+v", again)
	}
}

// logReadingRuntime is a runtime that reads back the logs it wrote.
type logReadingRuntime struct{ runtime.Runtime }

func (logReadingRuntime) CopyLog(io.Writer, string) error { return nil }
func (logReadingRuntime) FollowLog(context.Context, io.Writer, string, <-chan struct{}) error {
	return nil
}

// A container's log is read by the runtime that wrote it: the log the
// API serves names that runtime's reader, for the current attempt and
// for the previous one.
func TestLogsAreReadByTheirRuntime(t *testing.T) {
	m := &countingMachine{Machine: lifecycle.NewMachine(lifecycle.DefaultConfig()), built: map[types.UID]int{}}
	m.SetDesired([]*v1.Pod{webPod("a", "ua")})
	rt := logReadingRuntime{}
	v := testView()
	v.opts.RuntimeOf = func(*v1.Pod) runtime.Runtime { return rt }
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	step(v, m, now, Sources{Desired: none})
	ref, err := v.Log("default", "a", "app", false)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Reader != (runtime.LogReader)(rt) || ref.Path != "/logs/ua/app/1.log" {
		t.Fatalf("log %+v, want /logs/ua/app/1.log read by the pod's runtime", ref)
	}
}
