package probes

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/prereq"
)

// An exec handler of a container with a mount namespace of its own runs
// its command there; one whose namespace cannot be opened fails, saying
// why, and runs nothing.
func TestExecInTheContainersMountNamespace(t *testing.T) {
	gone := target
	gone.MountNS = func() (*os.File, error) { return nil, errors.New("the container's process has ended") }
	err := Exec(context.Background(), gone, []string{"true"}, time.Second)
	if err == nil || !strings.Contains(err.Error(), "process has ended") {
		t.Fatalf("err = %v", err)
	}

	prereq.Root(t, "joining a mount namespace")
	in := target
	in.MountNS = func() (*os.File, error) { return os.Open("/proc/self/ns/mnt") }
	if err := Exec(context.Background(), in, []string{"sh", "-c", "exit 0"}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := Exec(context.Background(), in, []string{"sh", "-c", "exit 3"}, 5*time.Second); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want the command's exit status", err)
	}
}
