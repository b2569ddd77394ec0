package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
	"github.com/podvisor/podvisor/test/compat"
)

// release is a podvisor build the compatibility tests run: its binaries
// side by side in dir, as installed, and the version it reports.
type release struct {
	name    string
	dir     string
	version string
}

func (r release) podvisor() string { return filepath.Join(r.dir, "podvisor") }
func (r release) shim() string     { return filepath.Join(r.dir, "podvisor-shim") }

var (
	previousOnce sync.Once
	previousRel  compat.Release
	previousErr  error
)

// previousAndCurrent returns the previous release (test/compat/
// previous-release, built once and cached under bin/compat) and the build
// under test, and checks that they really are two keeper versions and two
// daemon versions: otherwise the tests would prove nothing.
func previousAndCurrent(t *testing.T) (prev, cur release) {
	t.Helper()
	requireRoot(t)
	previousOnce.Do(func() {
		start := time.Now()
		previousRel, previousErr = compat.Previous()
		if previousErr == nil {
			t.Logf("the previous release's binaries (%s) ready in %v", previousRel.Dir, time.Since(start).Round(time.Millisecond))
		}
	})
	if errors.Is(previousErr, compat.ErrUnavailable) {
		prerequisite(t, "%v", previousErr)
	} else if previousErr != nil {
		t.Fatal(previousErr)
	}
	prev = release{name: "previous release " + previousRel.Version, dir: previousRel.Dir, version: previousRel.Version}
	cur = release{name: "the build under test", dir: filepath.Dir(binary)}
	v, err := exec.Command(cur.podvisor(), "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", cur.podvisor(), err)
	}
	cur.version = strings.Fields(string(v) + " ?")[1] // "podvisor VERSION (go..., os/arch)"
	if cur.version == prev.version {
		t.Fatalf("the previous release and the build under test both report version %s", cur.version)
	}
	pk, err1 := shim.KeeperVersion(prev.shim())
	ck, err2 := shim.KeeperVersion(cur.shim())
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if pk == ck {
		t.Fatalf("the previous release's podvisor-shim and the one under test are the same keeper version %s", pk)
	}
	return prev, cur
}

// An agent update (or a downgrade) is a daemon of one version exiting,
// its pods left running, and a daemon of another version, from other
// binaries, starting on the same data directory and config: every process
// container keeps its process, its start time and a restart count of 0,
// under the keeper that ran it; new pods go to the new version's keeper,
// and the old keeper, drained, exits with its last container.
func TestUpdateKeepsProcessPods(t *testing.T) {
	for _, tc := range []struct {
		name      string
		downgrade bool
		sig       syscall.Signal
	}{
		{"upgrade/SIGTERM", false, syscall.SIGTERM},
		{"upgrade/SIGKILL", false, syscall.SIGKILL},
		{"downgrade/SIGTERM", true, syscall.SIGTERM},
		{"downgrade/SIGKILL", true, syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev, cur := previousAndCurrent(t)
			from, to := prev, cur
			if tc.downgrade {
				from, to = cur, prev
			}
			updateProcessPods(t, from, to, tc.sig)
		})
	}
}

// compatPods are the process pods that live through the update: restart
// policies Always and OnFailure, a readiness probe, and a completed init
// container. Each main container writes its pid to DIR/NAME.pid.
func compatPods(dir string) map[string]string {
	main := func(name string) string {
		// $$ is a literal $ in a pod's command: $$$$ is the shell's $$.
		return fmt.Sprintf(`["sh", "-c", "echo $$$$ > %s; exec sleep 100000"]`, filepath.Join(dir, name+".pid"))
	}
	return map[string]string{
		"always": `apiVersion: v1
kind: Pod
metadata: {name: always}
spec:
  runtimeClassName: process
  restartPolicy: Always
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: host
    command: ` + main("always") + `
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
`,
		"onfailure": `apiVersion: v1
kind: Pod
metadata: {name: onfailure}
spec:
  runtimeClassName: process
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 2
  containers:
  - {name: main, image: host, command: ` + main("onfailure") + `}
`,
		"inited": fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: inited}
spec:
  runtimeClassName: process
  restartPolicy: Always
  terminationGracePeriodSeconds: 2
  initContainers:
  - {name: init, image: host, command: ["sh", "-c", "echo ran >> %s"]}
  containers:
  - {name: main, image: host, command: %s}
`, filepath.Join(dir, "inited.init"), main("inited")),
	}
}

// containerRun is what must not change about a container across the
// update.
type containerRun struct {
	id       string
	started  string
	restarts int32
	pid      int
	pidStart uint64
}

func updateProcessPods(t *testing.T, from, to release, sig syscall.Signal) {
	d := newDaemon(t)
	d.bin = from.podvisor()
	d.start()
	pods := compatPods(d.dir)
	for name, manifest := range pods {
		d.write(name+".yaml", manifest)
	}
	before := map[string]containerRun{}
	for name := range pods {
		p := d.waitPod(name, 15*time.Second, podReady)
		before[name] = runOf(t, d, p)
	}
	oldKeepers := keeperPids(t, d)
	if len(oldKeepers) != 1 {
		t.Fatalf("keepers of %s: %v, want one", from.name, oldKeepers)
	}
	oldKeeper := oldKeepers[0]
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", oldKeeper)); exe != from.shim() {
		t.Fatalf("the keeper runs %s, want %s's %s", exe, from.name, from.shim())
	}
	if v, err := d.client.Version(context.Background()); err != nil || v.Version != from.version {
		t.Fatalf("the first daemon reports version %+v (%v), want %s", v, err, from.version)
	}

	// The update: the daemon exits (leaving its pods), the other
	// version's daemon starts on the same data directory and config.
	d.stop(sig)
	d.bin = to.podvisor()
	d.start()
	if v, err := d.client.Version(context.Background()); err != nil || v.Version != to.version {
		t.Fatalf("the second daemon reports version %+v (%v), want %s", v, err, to.version)
	}
	for name, was := range before {
		p := d.waitPod(name, 15*time.Second, podReady)
		if now := runOf(t, d, p); now != was {
			t.Fatalf("%s after the update from %s to %s: %+v, want the same container %+v\n%s", name, from.name, to.name, now, was, describePod(p))
		}
		if ppid := parentOf(was.pid); ppid != oldKeeper {
			t.Fatalf("%s's container %d has parent %d, want the keeper %d that started it", name, was.pid, ppid, oldKeeper)
		}
		if len(p.Status.InitContainerStatuses) > 0 {
			init := p.Status.InitContainerStatuses[0].State.Terminated
			if init == nil || init.ExitCode != 0 || p.Status.InitContainerStatuses[0].RestartCount != 0 {
				t.Fatalf("%s's init container after the update: %s", name, describeInit(p))
			}
		}
	}
	if runs := readLines(filepath.Join(d.dir, "inited.init")); len(runs) != 1 {
		t.Fatalf("the init container ran %d times, want once", len(runs))
	}
	out, errOut, code := d.cli("get", "pods")
	for name := range pods {
		if !hasPodRow(out, name, "1/1", "Running", "0") {
			t.Fatalf("podvisor get pods of %s (exit %d) does not show %s running, ready and never restarted:\n%s%s", to.name, code, name, out, errOut)
		}
	}

	// A new pod goes to a keeper of the new version; the old one still
	// runs its containers.
	d.write("fresh.yaml", processPod("fresh", "Always", 2, "echo $$$$ > "+filepath.Join(d.dir, "fresh.pid")+"; exec sleep 100000"))
	d.waitPod("fresh", 15*time.Second, podReady)
	fresh := waitForValue(t, 10*time.Second, "fresh's container to write its pid", func() int {
		return pidFrom(filepath.Join(d.dir, "fresh.pid"))
	}, func(pid int) bool { return pid > 0 })
	newKeeper := parentOf(fresh)
	if newKeeper == oldKeeper {
		t.Fatalf("the new pod runs under the old keeper %d", oldKeeper)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", newKeeper)); exe != to.shim() {
		t.Fatalf("the new pod's parent %d runs %s, want %s's keeper %s", newKeeper, exe, to.name, to.shim())
	}
	if got := keeperPids(t, d); len(got) != 2 || !alive(oldKeeper) {
		t.Fatalf("keepers: %v, want the old %d and the new %d", got, oldKeeper, newKeeper)
	}
	for _, name := range []string{"onfailure", "inited"} {
		if now := runOf(t, d, d.waitPod(name, 5*time.Second, podReady)); now != before[name] {
			t.Fatalf("%s once the new pod runs: %+v, want the same container %+v", name, now, before[name])
		}
	}
	t.Logf("%s (keeper %d) to %s (keeper %d): containers %v kept", from.version, oldKeeper, to.version, newKeeper, before)

	// An old container that dies is seen through the old keeper and
	// restarted by its policy under the new one.
	always := before["always"]
	syscall.Kill(always.pid, syscall.SIGKILL)
	p := d.waitPod("always", 15*time.Second, func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount == 1 && cs.State.Running != nil
	})
	if last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
		t.Fatalf("always's container killed under the old keeper: %s", describePod(p))
	}
	restarted := waitForValue(t, 10*time.Second, "always's restarted container to write its pid", func() int {
		return pidFrom(filepath.Join(d.dir, "always.pid"))
	}, func(pid int) bool { return pid != always.pid && pid > 0 })
	if ppid := parentOf(restarted); ppid != newKeeper {
		t.Fatalf("always's restarted container %d has parent %d, want the new keeper %d", restarted, ppid, newKeeper)
	}

	// The old keeper was told to drain: once its containers end, it goes.
	for name := range pods {
		d.remove(name + ".yaml")
	}
	for name := range pods {
		d.waitGone(name, 20*time.Second)
	}
	waitForLong(t, 20*time.Second, fmt.Sprintf("the drained keeper %d of %s to exit with its last container", oldKeeper, from.name),
		func() bool { return exited(oldKeeper) })
	if got := keeperPids(t, d); len(got) != 1 || got[0] != newKeeper {
		t.Fatalf("keepers once the old containers ended: %v, want only the new %d", got, newKeeper)
	}
	if p := d.waitPod("fresh", 5*time.Second, podReady); p.Status.ContainerStatuses[0].RestartCount != 0 || !alive(fresh) {
		t.Fatalf("the new pod: %s", describePod(p))
	}
}

// runOf reads a pod's one main container: its status and its process.
func runOf(t *testing.T, d *daemon, p *v1.Pod) containerRun {
	t.Helper()
	cs := p.Status.ContainerStatuses[0]
	pid := waitForValue(t, 10*time.Second, p.Name+"'s container to write its pid", func() int {
		return pidFrom(filepath.Join(d.dir, p.Name+".pid"))
	}, func(pid int) bool { return pid > 0 })
	if !alive(pid) || exited(pid) {
		t.Fatalf("%s's container %d is not running", p.Name, pid)
	}
	start, err := shim.ProcStartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	run := containerRun{id: cs.ContainerID, restarts: cs.RestartCount, pid: pid, pidStart: start}
	if cs.State.Running != nil {
		run.started = cs.State.Running.StartedAt.UTC().Format(time.RFC3339)
	}
	return run
}

func describeInit(p *v1.Pod) string {
	s := ""
	for _, c := range p.Status.InitContainerStatuses {
		s += fmt.Sprintf("[%s restarts=%d state=%+v]", c.Name, c.RestartCount, c.State)
	}
	return s
}

// hasPodRow reports whether podvisor get pods printed the pod with these
// READY, STATUS and RESTARTS columns.
func hasPodRow(out, name string, cols ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > len(cols) && f[0] == name && strings.Join(f[1:1+len(cols)], " ") == strings.Join(cols, " ") {
			return true
		}
	}
	return false
}

// parentOf is a process's parent pid, 0 if it is gone.
func parentOf(pid int) int {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			ppid, _ := strconv.Atoi(strings.TrimSpace(v))
			return ppid
		}
	}
	return 0
}

// pidFrom reads a pid a container wrote, 0 until it has.
func pidFrom(path string) int {
	data, _ := os.ReadFile(path)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// The same update for a containerd pod: the daemon and its plugin
// (podvisor-containerd) of one version exit, those of the other start.
// The container keeps its task, start time and restart count, and its
// output, written all along, reaches its log whole: the new plugin takes
// over the FIFOs the old one read.
func TestUpdateKeepsContainerdPod(t *testing.T) {
	for _, tc := range []struct {
		name      string
		downgrade bool
		sig       syscall.Signal
	}{
		{"upgrade/SIGTERM", false, syscall.SIGTERM},
		{"upgrade/SIGKILL", false, syscall.SIGKILL},
		{"downgrade/SIGTERM", true, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev, cur := previousAndCurrent(t)
			from, to := prev, cur
			if tc.downgrade {
				from, to = cur, prev
			}
			updateContainerdPod(t, from, to, tc.sig)
		})
	}
}

const tickerPod = `apiVersion: v1
kind: Pod
metadata: {name: ticker}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: ` + testImage + `
    imagePullPolicy: Never
    command: ["sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done"]
`

func updateContainerdPod(t *testing.T, from, to release, sig syscall.Signal) {
	d, ctrd := ctrdDaemonOf(t, from.podvisor())
	d.write("ticker.yaml", tickerPod)
	p := d.waitPod("ticker", 30*time.Second, podReady)
	cs := p.Status.ContainerStatuses[0]
	id := strings.TrimPrefix(cs.ContainerID, "containerd://")
	task := taskPid(t, ctrd.Address, id)
	if task == 0 {
		t.Fatalf("containerd runs no task for %s", id)
	}
	if v, err := d.client.Version(context.Background()); err != nil || v.Version != from.version {
		t.Fatalf("the first daemon reports version %+v (%v), want %s", v, err, from.version)
	}
	switched := waitForValue(t, 10*time.Second, "ticker to log through "+from.name+"'s plugin", func() int { return lastTick(t, d) }, func(n int) bool { return n >= 5 })

	oldPlugins := pluginPids(d)
	if len(oldPlugins) != 1 {
		t.Fatalf("podvisor-containerd processes of this test: %v, want one", oldPlugins)
	}
	d.stop(sig)
	// The plugin ends with its daemon (its stdin closes), even killed -9.
	waitFor(t, fmt.Sprintf("%s's plugin %d to exit with its daemon", from.name, oldPlugins[0]), func() bool { return exited(oldPlugins[0]) })
	d.bin = to.podvisor()
	d.start()
	if v, err := d.client.Version(context.Background()); err != nil || v.Version != to.version {
		t.Fatalf("the second daemon reports version %+v (%v), want %s", v, err, to.version)
	}
	p = d.waitPod("ticker", 30*time.Second, podReady)
	if now := p.Status.ContainerStatuses[0]; now.ContainerID != cs.ContainerID || now.RestartCount != 0 ||
		now.State.Running == nil || !now.State.Running.StartedAt.Equal(&cs.State.Running.StartedAt) {
		t.Fatalf("after the update from %s to %s: %s, want container %s running since %v", from.name, to.name, describePod(p), id, cs.State.Running.StartedAt)
	}
	if now := taskPid(t, ctrd.Address, id); now != task {
		t.Fatalf("the container's task is %d after the update, was %d", now, task)
	}
	plugins := pluginPids(d)
	if len(plugins) != 1 {
		t.Fatalf("podvisor-containerd processes of this test after the update: %v, want one", plugins)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", plugins[0])); exe != filepath.Join(to.dir, "podvisor-containerd") {
		t.Fatalf("the plugin runs %s, want %s's", exe, to.name)
	}
	// Lines written after the switch reach the log through the new plugin,
	// and none is lost or doubled across it.
	last := waitForValue(t, 15*time.Second, fmt.Sprintf("ticks after %d (the last logged before the update) in the log", switched),
		func() int { return lastTick(t, d) }, func(n int) bool { return n >= switched+20 })
	out, _, _ := d.cli("logs", "ticker")
	seen := map[int]int{}
	for _, line := range strings.Split(out, "\n") {
		if n, err := strconv.Atoi(strings.TrimPrefix(line, "tick ")); err == nil {
			seen[n]++
		}
	}
	for n := 0; n <= last; n++ {
		if seen[n] != 1 {
			t.Fatalf("tick %d logged %d times across the update (ticks up to %d logged, %d before the switch)", n, seen[n], last, switched)
		}
	}
	if p := d.waitPod("ticker", 5*time.Second, podReady); p.Status.ContainerStatuses[0].RestartCount != 0 || taskPid(t, ctrd.Address, id) != task {
		t.Fatalf("ticker once its ticks were read: %s", describePod(p))
	}
	t.Logf("%s to %s: task %d kept, ticks 0..%d logged once each (%d before the switch)", from.version, to.version, task, last, switched)
	d.remove("ticker.yaml")
	d.waitGone("ticker", 30*time.Second)
	waitFor(t, "containerd to hold no container after ticker's removal", func() bool { return len(ctrContainers(t, ctrd)) == 0 })
}

// lastTick is the highest tick in ticker's log, -1 if none.
func lastTick(t *testing.T, d *daemon) int {
	out, _, _ := d.cli("logs", "ticker")
	last := -1
	for _, line := range strings.Split(out, "\n") {
		if n, err := strconv.Atoi(strings.TrimPrefix(line, "tick ")); err == nil && n > last {
			last = n
		}
	}
	return last
}

// taskPid is the pid containerd reports for the container's task, 0 if
// it has none.
func taskPid(t *testing.T, address, id string) int {
	out, err := exec.Command("ctr", "-a", address, "-n", "podvisor", "tasks", "ls").Output()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			pid, _ := strconv.Atoi(f[1])
			return pid
		}
	}
	return 0
}

// pluginPids lists the podvisor-containerd processes whose parent is this
// test's daemon.
func pluginPids(d *daemon) []int {
	if d.cmd == nil {
		return nil
	}
	entries, _ := filepath.Glob("/proc/[0-9]*/exe")
	var out []int
	for _, e := range entries {
		exe, err := os.Readlink(e)
		if err != nil || filepath.Base(exe) != "podvisor-containerd" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if parentOf(pid) == d.cmd.Process.Pid {
			out = append(out, pid)
		}
	}
	return out
}

// The same update for process pods that run a shim each (process:
// {keeper: false}, as under the systemd cgroup driver): the new daemon
// adopts the old version's shims, follows their containers' exits, and
// starts new containers under its own shim.
func TestUpdateKeepsShimPods(t *testing.T) {
	for _, tc := range []struct {
		name      string
		downgrade bool
		sig       syscall.Signal
	}{
		{"upgrade/SIGKILL", false, syscall.SIGKILL},
		{"downgrade/SIGTERM", true, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev, cur := previousAndCurrent(t)
			from, to := prev, cur
			if tc.downgrade {
				from, to = cur, prev
			}
			updateShimPods(t, from, to, tc.sig)
		})
	}
}

func updateShimPods(t *testing.T, from, to release, sig syscall.Signal) {
	d := newDaemon(t)
	d.withConfig("process: {keeper: false}\n")
	d.bin = from.podvisor()
	d.start()
	pods := compatPods(d.dir)
	for name, manifest := range pods {
		d.write(name+".yaml", manifest)
	}
	before := map[string]containerRun{}
	shims := map[string]int{}
	for name := range pods {
		before[name] = runOf(t, d, d.waitPod(name, 15*time.Second, podReady))
		shims[name] = parentOf(before[name].pid)
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", shims[name])); exe != from.shim() {
			t.Fatalf("%s's container runs under %d (%s), want a shim of %s", name, shims[name], exe, from.name)
		}
	}
	if n := countKeepers(t, d); n != 0 {
		t.Fatalf("%d keepers with process: {keeper: false}", n)
	}
	d.stop(sig)
	d.bin = to.podvisor()
	d.start()
	for name, was := range before {
		p := d.waitPod(name, 15*time.Second, podReady)
		if now := runOf(t, d, p); now != was || parentOf(was.pid) != shims[name] {
			t.Fatalf("%s after the update from %s to %s: %+v under %d, want the same container %+v under its shim %d",
				name, from.name, to.name, now, parentOf(now.pid), was, shims[name])
		}
	}
	if runs := readLines(filepath.Join(d.dir, "inited.init")); len(runs) != 1 {
		t.Fatalf("the init container ran %d times, want once", len(runs))
	}
	// An old container that dies is seen through its old shim and
	// restarted under a shim of the new version.
	always := before["always"]
	syscall.Kill(always.pid, syscall.SIGKILL)
	p := d.waitPod("always", 15*time.Second, func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount == 1 && cs.State.Running != nil
	})
	if last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
		t.Fatalf("always's container killed under the old shim: %s", describePod(p))
	}
	restarted := waitForValue(t, 10*time.Second, "always's restarted container to write its pid", func() int {
		return pidFrom(filepath.Join(d.dir, "always.pid"))
	}, func(pid int) bool { return pid != always.pid && pid > 0 })
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", parentOf(restarted))); exe != to.shim() {
		t.Fatalf("always's restarted container runs under %s, want a shim of %s", exe, to.name)
	}
	waitFor(t, fmt.Sprintf("always's old shim %d to exit", shims["always"]), func() bool { return exited(shims["always"]) })
	for name := range pods {
		d.remove(name + ".yaml")
	}
	for name := range pods {
		d.waitGone(name, 20*time.Second)
	}
	for name, shim := range shims {
		waitFor(t, fmt.Sprintf("%s's shim %d of %s to exit", name, shim, from.name), func() bool { return exited(shim) })
	}
}
