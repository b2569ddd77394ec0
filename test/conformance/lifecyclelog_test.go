package conformance

// Upstream's ExecCommand and its output list, for the Containers
// Lifecycle tests. Every container, hook and probe appends "TIME NAME
// WHAT" lines (Starting, Started, Delaying, Looping, Exiting; TIME is
// /proc/uptime's, the same clock in every container) to one file the
// whole pod shares, and the tests compare the order of the lines.
// Upstream writes to each container's log and merges them by timestamp;
// one shared file gives the order without merging.
//
// Where the file lives: a host directory for process pods (they take no
// volumes); on containerd, an emptyDir the test reads from the host side
// (<data-dir>/pods/<uid>/volumes/scratch), so it can be read after every
// container of the pod has exited.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// execCmd is upstream's execCommand.
type execCmd struct {
	ExitCode   int
	StartDelay int // seconds before "Started"
	Delay      int // seconds before "Exiting"
	// LoopForever logs "Looping" every LoopPeriod seconds ("1" when
	// empty) until terminated.
	LoopForever bool
	LoopPeriod  string
	// TerminationSeconds is how long the command takes to exit after
	// SIGTERM (it then exits with ExitCode).
	TerminationSeconds int
}

// orderLog is the pod's shared log file.
type orderLog struct {
	e      *env
	dir    string // as the containers see it
	onHost string // process pods: the same path on the host
}

// newOrderLog makes the shared log's directory: a host directory for
// process pods, an emptyDir at /persistent on containerd (added by
// create).
func (e *env) newOrderLog() orderLog {
	if e.process() {
		dir := e.hostDir()
		return orderLog{e: e, dir: dir, onHost: dir}
	}
	return orderLog{e: e, dir: "/persistent"}
}

// create gives every container of the pod the shared log (upstream's
// preparePod) and creates it.
func (l orderLog) create(p *v1.Pod) {
	if l.onHost == "" {
		l.e.scratch(p, "", l.dir)
	}
	l.e.create(p)
}

// execCommand is upstream's ExecCommand(name, c): a container, hook or
// probe command that logs its steps to the shared file. It handles
// SIGTERM from before its "Starting" line (a container's first process
// ignores SIGTERM until it sets a handler).
func (l orderLog) execCommand(name string, c execCmd) []string {
	var b strings.Builder
	fmt.Fprintf(&b, "log() { read t _ < /proc/uptime; echo \"$t %s $*\" >> %s/log; }\n", name, l.dir)
	fmt.Fprintf(&b, "_term() { sleep %d; log Exiting; exit %d; }\ntrap _term TERM\n", c.TerminationSeconds, c.ExitCode)
	if c.StartDelay > 0 {
		fmt.Fprintf(&b, "log Starting %d\nsleep %d & wait $!\n", c.StartDelay, c.StartDelay)
		fmt.Fprintf(&b, "log Started\ntouch %s/started-%s\n", l.dir, name)
	} else {
		// Without a start delay, "Starting" and "Started" are one write:
		// nothing happens between them.
		fmt.Fprintf(&b, "read t _ < /proc/uptime; printf '%%s %s Starting 0\n%%s %s Started\n' $t $t >> %s/log\ntouch %s/started-%s\n", name, name, l.dir, l.dir, name)
	}
	fmt.Fprintf(&b, "log Delaying %d\n", c.Delay)
	if c.Delay > 0 {
		fmt.Fprintf(&b, "sleep %d & wait $!\n", c.Delay)
	}
	if c.LoopForever {
		period := c.LoopPeriod
		if period == "" {
			period = "1"
		}
		fmt.Fprintf(&b, "while true; do log Looping; sleep %s & wait $!; done\n", period)
	}
	fmt.Fprintf(&b, "log Exiting\nexit %d\n", c.ExitCode)
	return []string{"sh", "-c", b.String()}
}

// startedFile is the file name's command creates once it logged
// "Started" (upstream probes `test -f started` in the working directory).
func (l orderLog) startedFile(name string) string { return l.dir + "/started-" + name }

// gated gives a sidecar a startup probe on its started file, for the tests
// whose order assertions rely on the kubelet's pause between starting one
// container and the next (its next pod sync, after a relist of up to
// 1 s): podvisor starts the next sidecar as soon as this one's process
// runs, and on a busy machine the next one's shell may log first. With
// the probe, "started" means it logged "Started", as upstream assumes.
func (l orderLog) gated(c v1.Container) v1.Container {
	c.StartupProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"test", "-f", l.startedFile(c.Name)}}},
		PeriodSeconds: 1, FailureThreshold: 60}
	return c
}

// hostPath is where the test reads the log.
func (l orderLog) hostPath(pod string) string {
	if l.onHost != "" {
		return filepath.Join(l.onHost, "log")
	}
	uid := string(l.e.get(pod).UID)
	return filepath.Join(l.e.n.data, "pods", uid, "volumes", "scratch", "log")
}

// output is one line of the log.
type output struct {
	at            time.Duration // since boot
	name, command string
}

// outputList is upstream's containerOutputList.
type outputList []output

// read parses the log, waiting up to 10 s until want ("NAME COMMAND",
// or "" for anything) is in it.
func (l orderLog) read(pod, want string) outputList {
	l.e.t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		b, err := os.ReadFile(l.hostPath(pod))
		if os.IsNotExist(err) && want == "" {
			err = nil // nothing ran that logs: an empty log
		}
		var o outputList
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			secs, perr := strconv.ParseFloat(f[0], 64)
			if perr != nil {
				continue
			}
			o = append(o, output{time.Duration(secs * float64(time.Second)), f[1], f[2]})
		}
		if err == nil && (want == "" || slices.ContainsFunc(o, func(x output) bool { return x.name+" "+x.command == want })) {
			return o
		}
		if time.Now().After(end) {
			l.e.t.Fatalf("pod %s: not within 10s: %q in the lifecycle log (read error: %v):\n%v", pod, want, err, o)
		}
	}
}

func (o outputList) String() string {
	var b strings.Builder
	for i, x := range o {
		fmt.Fprintf(&b, "%d) %.2f %s %s\n", i, x.at.Seconds(), x.name, x.command)
	}
	return b.String()
}

func (o outputList) find(name, command string, from int) int {
	for i := max(from, 0); i < len(o); i++ {
		if o[i].name == name && o[i].command == command {
			return i
		}
	}
	return -1
}

// RunTogetherLhsFirst: rhs started while lhs ran, after lhs started.
func (o outputList) RunTogetherLhsFirst(lhs, rhs string) error {
	lhsStart := o.find(lhs, "Started", 0)
	if lhsStart < 0 {
		return fmt.Errorf("%s never started:\n%v", lhs, o)
	}
	rhsStart := o.find(rhs, "Started", lhsStart+1)
	if rhsStart < 0 {
		return fmt.Errorf("%s never started after %s started:\n%v", rhs, lhs, o)
	}
	lhsExit := o.find(lhs, "Exiting", lhsStart+1)
	if lhsExit < 0 {
		return fmt.Errorf("%s never exited:\n%v", lhs, o)
	}
	if rhsStart > lhsExit {
		return fmt.Errorf("expected %s to start before %s exited:\n%v", rhs, lhs, o)
	}
	if o.find(rhs, "Exiting", rhsStart+1) < 0 {
		return fmt.Errorf("%s never exited:\n%v", rhs, o)
	}
	return nil
}

// RunTogether: either ran while the other did.
func (o outputList) RunTogether(lhs, rhs string) error {
	if err := o.RunTogetherLhsFirst(lhs, rhs); err != nil {
		return o.RunTogetherLhsFirst(rhs, lhs)
	}
	return nil
}

// StartsBefore: rhs is Starting after lhs Started (also for a restart of
// the same name).
func (o outputList) StartsBefore(lhs, rhs string) error {
	i := o.find(lhs, "Started", 0)
	if i < 0 {
		return fmt.Errorf("%s never started:\n%v", lhs, o)
	}
	if o.find(rhs, "Starting", i+1) < 0 {
		return fmt.Errorf("%s did not start after %s:\n%v", rhs, lhs, o)
	}
	return nil
}

// DoesntStartAfter: lhs did not start after rhs was Starting.
func (o outputList) DoesntStartAfter(lhs, rhs string) error {
	i := o.find(rhs, "Starting", 0)
	if i < 0 {
		return fmt.Errorf("%s never started:\n%v", rhs, o)
	}
	if o.find(lhs, "Started", i+1) >= 0 {
		return fmt.Errorf("expected %s not to start after %s:\n%v", lhs, rhs, o)
	}
	return nil
}

// ExitsBefore: rhs exited after lhs exited.
func (o outputList) ExitsBefore(lhs, rhs string) error {
	i := o.find(lhs, "Exiting", 0)
	if i < 0 {
		return fmt.Errorf("%s never exited:\n%v", lhs, o)
	}
	if o.find(rhs, "Exiting", i+1) < 0 {
		return fmt.Errorf("%s did not exit after %s exited:\n%v", rhs, lhs, o)
	}
	return nil
}

// Starts: name Started.
func (o outputList) Starts(name string) error {
	if o.find(name, "Started", 0) < 0 {
		return fmt.Errorf("%s never started:\n%v", name, o)
	}
	return nil
}

// DoesntStart: name never Started.
func (o outputList) DoesntStart(name string) error {
	if o.find(name, "Started", 0) >= 0 {
		return fmt.Errorf("%s started, but was not expected to:\n%v", name, o)
	}
	return nil
}

// Exits: name was Exiting.
func (o outputList) Exits(name string) error {
	if o.find(name, "Exiting", 0) < 0 {
		return fmt.Errorf("%s never exited:\n%v", name, o)
	}
	return nil
}

// HasRestarted: name was Starting twice.
func (o outputList) HasRestarted(name string) error {
	i := o.find(name, "Starting", 0)
	if i < 0 {
		return fmt.Errorf("%s never started:\n%v", name, o)
	}
	if o.find(name, "Starting", i+1) < 0 {
		return fmt.Errorf("%s never restarted:\n%v", name, o)
	}
	return nil
}

// HasNotRestarted: name was Starting once.
func (o outputList) HasNotRestarted(name string) error {
	i := o.find(name, "Starting", 0)
	if i < 0 {
		return fmt.Errorf("%s never started:\n%v", name, o)
	}
	if o.find(name, "Starting", i+1) >= 0 {
		return fmt.Errorf("%s restarted, but was not expected to:\n%v", name, o)
	}
	return nil
}

// must fails the test on an assertion's error (upstream's
// framework.ExpectNoError).
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}

// mustFail fails the test when an assertion holds that must not
// (upstream's Expect(err).To(HaveOccurred())).
func mustFail(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s", what)
	}
}

func prefixed(prefix, name string) string { return prefix + "-" + name }

// waitNoLongerRunning is upstream's WaitForPodNoLongerRunningInNamespace:
// the pod Succeeded or Failed.
func (e *env) waitNoLongerRunning(name string, timeout time.Duration) *v1.Pod {
	e.t.Helper()
	return e.waitPod(name, timeout, "the pod Succeeded or Failed", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
}

// TimeOfStart is when name was first Starting.
func (o outputList) TimeOfStart(name string) (time.Duration, error) {
	if i := o.find(name, "Starting", 0); i >= 0 {
		return o[i].at, nil
	}
	return 0, fmt.Errorf("%s never started:\n%v", name, o)
}

// TimeOfExit is when name was first Exiting.
func (o outputList) TimeOfExit(name string) (time.Duration, error) {
	if i := o.find(name, "Exiting", 0); i >= 0 {
		return o[i].at, nil
	}
	return 0, fmt.Errorf("%s never exited:\n%v", name, o)
}

// TimeOfLastLoop is when name last logged Looping.
func (o outputList) TimeOfLastLoop(name string) (time.Duration, error) {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].name == name && o[i].command == "Looping" {
			return o[i].at, nil
		}
	}
	return 0, fmt.Errorf("%s never looped:\n%v", name, o)
}
