package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/prereq"
)

// suRig is a self-update test's fleet: a real podhub and one podvisor
// daemon enrolled to it, installed from v0.26.1's build as a package
// installs it (podvisor, podvisor-shim, podvisor-containerd side by side)
// and run under a serviceLoop, as systemd runs it.
type suRig struct {
	t      *testing.T
	builds string // suBuilds
	root   string // a directory of the test's
	dev    string
	h      *podhubServer
	d      *daemon
	loop   *serviceLoop
	// podPids are the pods' containers, checked gone at the end.
	podPids []int
}

// newSURig starts the hub (chunkRate: its updates.chunkRate, "" for the
// default) and the device, v0.26.1, with its update.commitTimeout and
// podvisor run's runArgs; it returns once the daemon answers and the hub
// sees it Ready.
func newSURig(t *testing.T, dev, chunkRate, commitTimeout string, runArgs ...string) *suRig {
	t.Helper()
	if testing.Short() && !prereq.CI() {
		t.Skip("builds four podvisor versions and updates a daemon (a minute in all): skipped under -short, never in CI")
	}
	requireRoot(t) // process pods, their cgroups and keepers
	r := &suRig{t: t, builds: suBuilds(t), root: t.TempDir(), dev: dev}
	// Nothing of this test's is left running: registered first, it runs
	// after every other cleanup (the daemon's, its keepers', the hub's).
	t.Cleanup(func() {
		for _, pid := range r.podPids {
			if !exited(pid) {
				t.Errorf("pod container %d still running after the test", pid)
			}
		}
		if left := procsUnder(filepath.Dir(r.root)); len(left) > 0 {
			t.Errorf("processes of this test left running:\n%s", strings.Join(left, "\n"))
		}
	})

	r.h = &podhubServer{t: t, dataDir: filepath.Join(r.root, "hub"), addr: freeLoopback(t)}
	if out, code := r.h.cli("init"); code != 0 {
		t.Fatalf("podhub init: %d %s", code, out)
	}
	if chunkRate != "" {
		path := filepath.Join(r.h.dataDir, "podhub.yaml")
		conf, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(conf), "chunkRate: 4Mi") {
			t.Fatalf("podhub.yaml from init has no chunkRate: 4Mi (%v):\n%s", err, conf)
		}
		os.WriteFile(path, []byte(strings.Replace(string(conf), "chunkRate: 4Mi", "chunkRate: "+chunkRate, 1)), 0o600)
	}
	r.h.start()
	t.Cleanup(r.h.stop)

	d := newDaemon(t)
	r.d = d
	_, hubConfig := r.h.enrol(t, dev)
	d.withConfig(hubConfig + hostCommandsAsRoot + "update:\n  commitTimeout: " + commitTimeout + "\n")
	d.writeConfig()
	pkg := filepath.Join(d.dir, "usr-bin")
	os.Mkdir(pkg, 0o755)
	for _, name := range protocol.AgentArtifacts {
		if err := copyFile(filepath.Join(r.builds, "v0.26.1", name), filepath.Join(pkg, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d.bin = filepath.Join(pkg, "podvisor") // its CLI too
	argv := append([]string{d.bin, "run", "--manifests", d.manifests, "--data-dir", d.data, "--socket", d.socket, "--config", d.config}, runArgs...)
	r.loop = startServiceLoop(t, filepath.Join(d.dir, "daemon.log"), 500*time.Millisecond, 10, argv...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log (every run):\n%s", r.loop.log())
			t.Logf("device at the hub: %v", getDevice(t, r.h, dev))
		}
	})
	r.awaitDaemon("v0.26.1", 20*time.Second)
	waitForValue(t, 30*time.Second, dev+" Ready at the hub, running v0.26.1", func() deviceRow { return getDevice(t, r.h, dev) },
		func(hd deviceRow) bool { return hd.Ready && hd.Version == "v0.26.1" })
	return r
}

// daemonVersion is the version the daemon's API reports.
func (r *suRig) daemonVersion() string {
	v, err := r.d.client.Version(context.Background())
	if err != nil {
		return "no answer: " + err.Error()
	}
	return v.Version
}

func (r *suRig) awaitDaemon(version string, within time.Duration) {
	r.t.Helper()
	waitForValue(r.t, within, "the daemon's API to answer as "+version, r.daemonVersion, func(v string) bool { return v == version })
}

// applyHubPod applies a pod to the device at the hub.
func (r *suRig) applyHubPod(name, manifest string) {
	path := filepath.Join(r.root, name+".yaml")
	os.WriteFile(path, []byte(manifest), 0o644)
	mustCLI(r.t, r.h, "apply", "-f", path, "--device", r.dev)
}

// release pushes build's binaries as release version (more: push's other
// flags) and updates the device to it.
func (r *suRig) release(version, build string, more ...string) {
	r.t.Helper()
	push := append(append([]string{"release", "push", "--version", version}, more...), releaseFilesOf(r.builds, build)...)
	mustCLI(r.t, r.h, push...)
	mustCLI(r.t, r.h, "update", "--version", version, "--device", r.dev)
}

// awaitUpdate waits for update podvisor-VERSION to finish (Complete or
// Halted) and returns it.
func (r *suRig) awaitUpdate(version string, within time.Duration) updateStatus {
	r.t.Helper()
	name := "podvisor-" + version
	return waitForValue(r.t, within, "update "+name+" to finish", func() updateStatus { return getUpdate(r.t, r.h, name) },
		func(u updateStatus) bool { return u.Status.Phase == "Complete" || u.Status.Phase == "Halted" })
}

// pollFast waits up to d for cond, looking every 2 ms: for a moment that
// lasts a tenth of a second (a daemon between its switch and its commit).
func pollFast(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
	}
}

// checkNoZombie fails when the daemon has a child that exited and was
// never reaped.
func (r *suRig) checkNoZombie(when string) {
	r.t.Helper()
	pid := r.loop.pid()
	for _, child := range childrenOf(pid) {
		if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child)); strings.Contains(string(stat), ") Z ") {
			r.t.Fatalf("%s: the daemon (pid %d) leaves its child %d a zombie: %s", when, pid, child, stat)
		}
	}
}

// childrenOf lists the live processes whose parent is pid.
func childrenOf(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, path := range stats {
		data, err := os.ReadFile(path)
		i := strings.LastIndexByte(string(data), ')')
		if err != nil || i < 0 {
			continue
		}
		if f := strings.Fields(string(data[i+1:])); len(f) > 1 && f[1] == fmt.Sprint(pid) {
			var child int
			fmt.Sscan(filepath.Base(filepath.Dir(path)), &child)
			out = append(out, child)
		}
	}
	return out
}

// deviceRow is a device as podhub get devices -o json shows it.
type deviceRow struct {
	ID      string                `json:"id"`
	Ready   bool                  `json:"ready"`
	Online  bool                  `json:"online"`
	Version string                `json:"version"`
	Update  *protocol.UpdateState `json:"update"`
}

func getDevice(t *testing.T, h *podhubServer, id string) deviceRow {
	out := mustCLI(t, h, "get", "devices", "-o", "json")
	var ds []deviceRow
	if err := json.Unmarshal([]byte(out), &ds); err != nil {
		t.Fatalf("podhub get devices -o json: %v\n%s", err, out)
	}
	for _, d := range ds {
		if d.ID == id {
			return d
		}
	}
	return deviceRow{}
}

func (d deviceRow) String() string {
	s := fmt.Sprintf("%s ready=%v version=%s", d.ID, d.Ready, d.Version)
	if u := d.Update; u != nil {
		s += fmt.Sprintf(" update{order %d %s %s %d%% running=%s reason=%q}", u.Order, u.Phase, u.Version, u.Percent, u.Running, u.Reason)
	}
	return s
}

// slotRecord is a slot's slot.json, as the test reads it.
type slotRecord struct {
	Version   string `json:"version"`
	Order     int64  `json:"order"`
	State     string `json:"state"`
	TriesLeft int    `json:"triesLeft"`
	LastError string `json:"lastError"`
	Artifacts []struct {
		Name   string `json:"name"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	} `json:"artifacts"`
}

// currentSlot reads the data directory's current slot: its directory and
// record ("" when there is no current link).
func currentSlot(t *testing.T, data string) (string, slotRecord) {
	t.Helper()
	link := filepath.Join(data, "agent", "current")
	target, err := os.Readlink(link)
	if os.IsNotExist(err) {
		return "", slotRecord{}
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(data, "agent", target)
	var rec slotRecord
	b, err := os.ReadFile(filepath.Join(dir, "slot.json"))
	if err != nil {
		t.Fatalf("current -> %s: %v", target, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("%s/slot.json: %v", target, err)
	}
	return dir, rec
}

// verifySlot checks every file of a slot against its slot.json's size and
// SHA-256: a complete, verified version.
func verifySlot(t *testing.T, dir string, rec slotRecord) {
	t.Helper()
	if len(rec.Artifacts) != len(protocol.AgentArtifacts) {
		t.Fatalf("slot %s lists %d files, want %d: %+v", dir, len(rec.Artifacts), len(protocol.AgentArtifacts), rec)
	}
	for _, a := range rec.Artifacts {
		f, err := os.Open(filepath.Join(dir, a.Name))
		if err != nil {
			t.Fatalf("slot %s: %v", dir, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil || n != a.Size || hex.EncodeToString(h.Sum(nil)) != a.SHA256 {
			t.Fatalf("slot %s: %s is %d bytes with SHA-256 %x (%v), slot.json says %d bytes, %s", dir, a.Name, n, h.Sum(nil), err, a.Size, a.SHA256)
		}
	}
}

// exeOf is the binary a process runs.
func exeOf(pid int) string {
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return exe
}

// procsUnder lists the live processes whose binary or command line names
// a path under dir, one "pid args" line each.
func procsUnder(dir string) []string {
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, e := range entries {
		pdir := filepath.Dir(e)
		cmdline, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(filepath.Join(pdir, "exe"))
		args := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		var pid int
		fmt.Sscan(filepath.Base(pdir), &pid)
		if (strings.Contains(args, dir) || strings.HasPrefix(exe, dir)) && !exited(pid) {
			out = append(out, fmt.Sprintf("%d %s", pid, args))
		}
	}
	return out
}
