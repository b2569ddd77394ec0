// Package procstat reads the memory lines of /proc/PID/status for tests
// (the daemon's own file-backed RSS, a peer's).
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// KiB is the value of field (RssFile, VmRSS, ...: the name before the
// colon) in /proc/<pid>/status, in KiB; pid is a number or "self".
func KiB(pid, field string) (int, error) {
	path := "/proc/" + pid + "/status"
	status, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				return 0, fmt.Errorf("%s: %s: %w", path, field, err)
			}
			return kib, nil
		}
	}
	return 0, fmt.Errorf("no %s in %s", field, path)
}
