package prereq

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The rule, seen from outside: the test binary runs a test that calls
// Missing, once as on a developer's machine and once under CI=true.
func TestMissingSkipsLocallyAndFailsInCI(t *testing.T) {
	if os.Getenv("PODVISOR_PREREQ_CHILD") == "1" {
		return
	}
	for _, c := range []struct {
		ci       string
		fails    bool
		wantText string
	}{
		{"", false, "--- SKIP: TestChildMissing"},
		{"false", false, "--- SKIP: TestChildMissing"},
		{"true", true, "--- FAIL: TestChildMissing"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildMissing$", "-test.v")
		cmd.Env = append(os.Environ(), "PODVISOR_PREREQ_CHILD=1", "CI="+c.ci)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.fails || !strings.Contains(string(out), c.wantText) || !strings.Contains(string(out), "frobnicator 3") {
			t.Errorf("CI=%q: err %v, output:\n%s", c.ci, err, out)
		}
	}
}

func TestChildMissing(t *testing.T) {
	if os.Getenv("PODVISOR_PREREQ_CHILD") != "1" {
		t.Skip("run by TestMissingSkipsLocallyAndFailsInCI as a child") // not a prerequisite: a helper test
	}
	Missing(t, "frobnicator %d", 3)
}
