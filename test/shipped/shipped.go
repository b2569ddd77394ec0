// Package shipped builds podvisor's binaries for the tests as they ship:
// each with its flags from packaging/buildflags.sh (build tags, where
// inlining is off), so the tests run the code a device runs.
package shipped

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Build builds the commands (podvisor, podvisor-shim, ...) into dir,
// static.
func Build(dir string, cmds ...string) error {
	_, self, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(self), "..", "..")
	for _, cmd := range cmds {
		flags, err := exec.Command("sh", filepath.Join(repo, "packaging", "buildflags.sh"), cmd).Output()
		if err != nil {
			return fmt.Errorf("packaging/buildflags.sh %s: %w", cmd, err)
		}
		args := append([]string{"build", "-o", filepath.Join(dir, cmd)}, strings.Fields(string(flags))...)
		build := exec.Command("go", append(args, "github.com/podvisor/podvisor/cmd/"+cmd)...)
		build.Dir = repo
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w\n%s", cmd, err, out)
		}
	}
	return nil
}
