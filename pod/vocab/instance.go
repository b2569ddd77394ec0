package vocab

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// InstanceID names a container instance: unique per pod UID, container and
// attempt, and safe as a directory name.
func InstanceID(uid types.UID, container string, attempt int) string {
	return fmt.Sprintf("%s_%s_%d", uid, container, attempt)
}

// ParseInstanceID splits "<uid>_<container>_<attempt>"; ok is false for
// anything else.
func ParseInstanceID(id string) (uid types.UID, container string, attempt int, ok bool) {
	last := strings.LastIndexByte(id, '_')
	if last < 0 {
		return "", "", 0, false
	}
	first := strings.IndexByte(id, '_')
	if first == last {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(id[last+1:])
	if err != nil {
		return "", "", 0, false
	}
	return types.UID(id[:first]), id[first+1 : last], n, true
}

// ContainerIDPrefix is the runtime scheme in containerID fields.
const ContainerIDPrefix = "process://"

// Termination describes one finished container instance: the one exit
// record the runtimes report and the core keeps.
type Termination struct {
	InstanceID string    `json:"instanceID"`
	ExitCode   int32     `json:"exitCode"`
	Signal     int32     `json:"signal,omitempty"`
	Reason     string    `json:"reason"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
}
