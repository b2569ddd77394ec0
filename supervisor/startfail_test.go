package supervisor

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

func TestClassifyStart(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	pull := &runtime.CreateError{Reason: "ErrImagePull", Message: "no such image"}
	for _, tc := range []struct {
		name    string
		started runtime.Started
		want    startOutcome
	}{
		{"ran", runtime.Started{At: now}, startOutcome{Kind: startRan}},
		{"not created", runtime.Started{Err: pull},
			startOutcome{Kind: startNotCreated, Reason: "ErrImagePull", Message: "no such image"}},
		{"not created, something left", runtime.Started{Err: pull, Leftover: true},
			startOutcome{Kind: startNotCreated, Reason: "ErrImagePull", Message: "no such image", RemoveLeftover: true}},
		{"not created, wrapped", runtime.Started{Err: fmt.Errorf("plugin: %w", pull)},
			startOutcome{Kind: startNotCreated, Reason: "ErrImagePull", Message: "no such image"}},
		{"volumes not ready", runtime.Started{Err: runtime.ConfigError(fmt.Errorf("mounts: %w", &runtime.MountError{Volume: "cfg", Err: errors.New(`configmap "app" not found`)}))},
			startOutcome{Kind: startNotCreated, Reason: lifecycle.FailedMount, Message: `MountVolume.SetUp failed for volume "cfg" : configmap "app" not found`}},
		{"configuration", runtime.Started{Err: runtime.ConfigError(errors.New("env X: bad"))},
			startOutcome{Kind: startNotCreated, Reason: "CreateContainerConfigError", Message: "env X: bad"}},
		{"created, did not run", runtime.Started{Err: errors.New("exec: no such file")},
			startOutcome{Kind: startFailed, Exit: lifecycle.Termination{InstanceID: "u_c_1", ExitCode: 128, Reason: "StartError",
				Message: "exec: no such file", StartedAt: now, FinishedAt: now}}},
	} {
		if got := classifyStart(tc.started, "u_c_1", now); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The runtimes and the core speak of the same FailedMount.
func TestFailedMountIsOneWord(t *testing.T) {
	if runtime.FailedMount != lifecycle.FailedMount {
		t.Fatalf("runtime says %q, lifecycle %q", runtime.FailedMount, lifecycle.FailedMount)
	}
}
