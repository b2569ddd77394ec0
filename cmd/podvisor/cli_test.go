package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func statusPod(states ...v1.ContainerStatus) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: metav1.NewTime(now.Add(-90 * time.Second))}}
	for _, s := range states {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: s.Name})
	}
	p.Status.Phase = v1.PodRunning
	p.Status.ContainerStatuses = states
	return p
}

func TestPodRow(t *testing.T) {
	finished := metav1.NewTime(now.Add(-5 * time.Second))
	cases := []struct {
		name string
		pod  *v1.Pod
		want row
	}{
		{"running", statusPod(v1.ContainerStatus{Name: "a", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}),
			row{"1/1", "Running", "0", "90s"}},
		{"crash loop", statusPod(v1.ContainerStatus{Name: "a", RestartCount: 4,
			State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, FinishedAt: finished}}}),
			row{"0/1", "CrashLoopBackOff", "4 (5s ago)", "90s"}},
		{"killed without reason", statusPod(v1.ContainerStatus{Name: "a",
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 137, Signal: 9}}}),
			row{"0/1", "Signal:9", "0", "90s"}},
		{"one of two ready", statusPod(
			v1.ContainerStatus{Name: "a", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}},
			v1.ContainerStatus{Name: "b", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}),
			row{"1/2", "ContainerCreating", "0", "90s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := podRow(tc.pod, now); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	term := statusPod(v1.ContainerStatus{Name: "a", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}})
	term.DeletionTimestamp = &finished
	if got := podRow(term, now).status; got != "Terminating" {
		t.Fatalf("deleting pod status = %q", got)
	}
	invalid := &v1.Pod{Status: v1.PodStatus{Phase: v1.PodPending, Reason: "Invalid"}}
	if got := podRow(invalid, now).status; got != "Invalid" {
		t.Fatalf("invalid row status = %q", got)
	}
}

func TestParseInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	f := fs.Bool("f", false, "")
	c := fs.String("c", "", "")
	pos, err := parseInterspersed(fs, []string{"web", "-f", "-c", "app"})
	if err != nil || len(pos) != 1 || pos[0] != "web" || !*f || *c != "app" {
		t.Fatalf("pos=%v f=%v c=%q err=%v", pos, *f, *c, err)
	}
	if _, err := parseInterspersed(fs, []string{"--bogus"}); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown flag error = %v", err)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	fc := defaultConfig()
	if err := loadConfig(write("manifest: /x\n"), &fc); err == nil || !strings.Contains(err.Error(), "manifest") {
		t.Fatalf("unknown key: %v", err)
	}
	for body, want := range map[string]string{
		"backoff: {initial: 1m, max: 10s}\n": "backoff.initial",
		"backoff: {reset: -1s}\n":            "backoff.reset",
		"logs: {maxSize: 1Ki}\n":             "logs.maxSize",
		"logs: {maxFiles: 0}\n":              "logs.maxFiles",
	} {
		fc := defaultConfig()
		if err := loadConfig(write(body), &fc); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if _, err := daemonConfig(fc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v does not name %s", body, err, want)
		}
	}
}

func TestUnknownCommandIsOneLine(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 1 || strings.Count(errb.String(), "\n") != 1 {
		t.Fatalf("code %d stderr %q", code, errb.String())
	}
}
