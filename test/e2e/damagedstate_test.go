package e2e

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	_ "modernc.org/sqlite" // to checkpoint and damage the daemon's database
)

// A damaged, deleted or foreign state.db must not kill running pods: the
// daemon, killed with pods running, restarts on the damage, moves the file
// aside with an error-level line, adopts the same processes and rebuilds
// their history from the instance directories.
func TestDamagedStateDatabaseAdoptsRunningPods(t *testing.T) {
	damages := map[string]func(t *testing.T, db string){
		"truncated to zero": func(t *testing.T, db string) { must(t, os.Truncate(db, 0)) },
		"truncated mid-file": func(t *testing.T, db string) {
			st, err := os.Stat(db)
			must(t, err)
			must(t, os.Truncate(db, st.Size()/2))
		},
		"junk header": func(t *testing.T, db string) {
			f, err := os.OpenFile(db, os.O_WRONLY, 0)
			must(t, err)
			defer f.Close()
			_, err = f.WriteAt([]byte(strings.Repeat("junk\xff\x00", 20)), 0)
			must(t, err)
		},
		"deleted": func(t *testing.T, db string) { must(t, os.Remove(db)) },
		"WAL of another database": func(t *testing.T, db string) {
			must(t, os.WriteFile(db+"-wal", foreignWAL(t), 0o600))
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			d := newDaemon(t)
			d.withConfig("backoff: {initial: 1s, max: 1s}\n")
			d.start()
			// flaky crashes twice, then runs; steady just runs.
			d.write("flaky.yaml", processPod("flaky", "Always", 2, `n=$(cat `+d.dir+`/flaky.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > `+d.dir+`/flaky.n
[ $n -lt 3 ] && exit 3; echo $$$$ > `+d.dir+`/flaky.pid; exec sleep 1000`))
			d.write("steady.yaml", processPod("steady", "Always", 2, "echo $$$$ > "+d.dir+"/steady.pid; exec sleep 1000"))
			before := d.waitPod("flaky", 20*time.Second, func(p *v1.Pod) bool {
				return running(p) && p.Status.ContainerStatuses[0].RestartCount == 2
			})
			d.waitPod("steady", 10*time.Second, running)
			for _, f := range []string{"flaky.pid", "steady.pid"} {
				waitForLong(t, 10*time.Second, f+" written", func() bool { return len(readLines(d.dir+"/"+f)) == 1 })
			}
			pids := map[string]int{"flaky": pidIn(t, d.dir+"/flaky.pid"), "steady": pidIn(t, d.dir+"/steady.pid")}
			waitRecords(t, filepath.Join(d.data, "state.db"), `"restartCount":2`)
			d.stop(syscall.SIGKILL)

			db := filepath.Join(d.data, "state.db")
			checkpoint(t, db)
			damage(t, db)
			d.start()

			for name, pid := range pids {
				p := d.waitPod(name, 20*time.Second, running)
				if !alive(pid) {
					t.Fatalf("%s: process %d was killed", name, pid)
				}
				if now := pidIn(t, d.dir+"/"+name+".pid"); now != pid {
					t.Fatalf("%s: restarted (pid %d, was %d) instead of adopted", name, now, pid)
				}
				if p.Status.StartTime == nil || p.Status.StartTime.After(time.Now()) {
					t.Fatalf("%s: startTime %v", name, p.Status.StartTime)
				}
			}
			if n := readLines(d.dir + "/flaky.n"); len(n) != 1 || n[0] != "3" {
				t.Fatalf("flaky ran again: %v runs", n)
			}
			p := d.waitPod("flaky", time.Second, running)
			cs := p.Status.ContainerStatuses[0]
			if cs.RestartCount != before.Status.ContainerStatuses[0].RestartCount {
				t.Fatalf("restartCount %d after the rebuild, want %d", cs.RestartCount, before.Status.ContainerStatuses[0].RestartCount)
			}
			if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 3 {
				t.Fatalf("lastState %+v, want the crash with exit code 3", cs.LastTerminationState)
			}
			if name != "deleted" {
				if moved, _ := filepath.Glob(db + ".corrupt-*"); len(moved) == 0 {
					t.Fatalf("the damaged database was not moved aside")
				}
			}
			logText := d.log.String()
			if !strings.Contains(logText, "level=ERROR") || !strings.Contains(logText, db) {
				t.Fatalf("no error-level log line naming %s:\n%s", db, logText)
			}
			// Still supervising, and recording: a crash is restarted and
			// counted.
			syscall.Kill(pids["flaky"], syscall.SIGKILL)
			d.waitPod("flaky", 20*time.Second, func(p *v1.Pod) bool {
				return running(p) && p.Status.ContainerStatuses[0].RestartCount == cs.RestartCount+1
			})
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func pidIn(t *testing.T, path string) int {
	t.Helper()
	lines := readLines(path)
	if len(lines) == 0 {
		t.Fatalf("no pid in %s", path)
	}
	pid, err := strconv.Atoi(lines[0])
	must(t, err)
	return pid
}

// checkpoint moves what the killed daemon left in the WAL into the
// database file, so damage to the file is damage to the records.
func checkpoint(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	must(t, err)
	defer db.Close()
	_, err = db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	must(t, err)
}

// foreignWAL is the WAL another database left behind.
func foreignWAL(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	must(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{`PRAGMA wal_autocheckpoint = 0`, `CREATE TABLE pods (uid TEXT, record TEXT)`,
		`INSERT INTO pods VALUES ('x', randomblob(9000))`} {
		_, err := db.Exec(q)
		must(t, err)
	}
	data, err := os.ReadFile(path + "-wal")
	must(t, err)
	return data
}

// A database damaged under a running daemon fails its writes: the daemon
// logs them and keeps supervising, and its next start moves the file
// aside and adopts the pods.
func TestStateDatabaseDamagedWhileRunning(t *testing.T) {
	d := newDaemon(t)
	d.withConfig("backoff: {initial: 1s, max: 1s}\n")
	d.start()
	d.write("steady.yaml", processPod("steady", "Always", 2, "echo $$$$ > "+d.dir+"/steady.pid; exec sleep 1000"))
	d.waitPod("steady", 10*time.Second, running)
	waitForLong(t, 10*time.Second, "steady.pid written", func() bool { return len(readLines(d.dir+"/steady.pid")) == 1 })
	pid := pidIn(t, d.dir+"/steady.pid")

	db := filepath.Join(d.data, "state.db")
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		junk := []byte(strings.Repeat("junk\xff\x00\x13", 4096))
		must(t, os.WriteFile(f, junk, 0o600))
	}
	// Writes now meet a broken file: every crash and restart is one.
	for i := 1; i <= 3; i++ {
		syscall.Kill(pidIn(t, d.dir+"/steady.pid"), syscall.SIGKILL)
		d.waitPod("steady", 20*time.Second, func(p *v1.Pod) bool {
			return running(p) && p.Status.ContainerStatuses[0].RestartCount == int32(i)
		})
		waitForLong(t, 10*time.Second, "steady restarted", func() bool {
			l := readLines(d.dir + "/steady.pid")
			return len(l) == 1 && l[0] != strconv.Itoa(pid)
		})
		pid = pidIn(t, d.dir+"/steady.pid")
	}
	if d.cmd.ProcessState != nil {
		t.Fatalf("the daemon exited:\n%s", d.log)
	}
	if !strings.Contains(d.log.String(), "level=ERROR msg=\"saving state\"") || !strings.Contains(d.log.String(), db) {
		t.Fatalf("failed writes not logged with the database's path:\n%s", d.log)
	}
	d.stop(syscall.SIGKILL)
	d.start()
	p := d.waitPod("steady", 20*time.Second, running)
	if !alive(pid) || pidIn(t, d.dir+"/steady.pid") != pid {
		t.Fatalf("the running container %d was not adopted after the restart", pid)
	}
	if p.Status.ContainerStatuses[0].RestartCount != 3 {
		t.Fatalf("restartCount %d, want 3 rebuilt from the instance directories", p.Status.ContainerStatuses[0].RestartCount)
	}
}

// The hub's tables live in state.db too, and the hub opens them before
// the daemon runs: the damage is found first, so the daemon comes up.
func TestDamagedStateDatabaseWithAHubConfigured(t *testing.T) {
	d := newDaemon(t)
	// A hub that never answers: the device retries in the background.
	d.withConfig("hub: {url: \"mqtt://" + freeLoopback(t) + "\", allowUnsigned: true}\n")
	d.start()
	d.write("steady.yaml", processPod("steady", "Always", 2, "echo $$$$ > "+d.dir+"/steady.pid; exec sleep 1000"))
	d.waitPod("steady", 10*time.Second, running)
	waitForLong(t, 10*time.Second, "steady.pid written", func() bool { return len(readLines(d.dir+"/steady.pid")) == 1 })
	pid := pidIn(t, d.dir+"/steady.pid")
	waitRecords(t, filepath.Join(d.data, "state.db"), `"phase":"Running"`)
	d.stop(syscall.SIGKILL)
	db := filepath.Join(d.data, "state.db")
	checkpoint(t, db)
	must(t, os.WriteFile(db, []byte(strings.Repeat("junk\xff\x00", 1000)), 0o600))
	d.start()
	d.waitPod("steady", 20*time.Second, running)
	if !alive(pid) || pidIn(t, d.dir+"/steady.pid") != pid {
		t.Fatalf("the running container %d was not adopted", pid)
	}
	if moved, _ := filepath.Glob(db + ".corrupt-*"); len(moved) == 0 {
		t.Fatalf("the damaged database was not moved aside")
	}
}

// Containerd pods too: after the records were lost, the containers
// containerd runs are adopted, not started a second time.
func TestDamagedStateDatabaseAdoptsContainerdPods(t *testing.T) {
	d, ctrd := ctrdDaemon(t)
	d.write("ctr.yaml", `apiVersion: v1
kind: Pod
metadata: {name: ctr}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - {name: app, image: `+testImage+`, imagePullPolicy: Never, command: ["sh", "-c", "sleep 1000"]}
`)
	before := d.waitPod("ctr", 30*time.Second, running)
	tasks := func() string {
		out, err := exec.Command("ctr", "-a", ctrd.Address, "-n", "podvisor", "tasks", "ls").Output()
		must(t, err)
		return string(out)
	}
	taskList := tasks()
	waitRecords(t, filepath.Join(d.data, "state.db"), `"phase":"Running"`)
	d.stop(syscall.SIGKILL)
	db := filepath.Join(d.data, "state.db")
	checkpoint(t, db)
	must(t, os.WriteFile(db, []byte(strings.Repeat("junk\xff\x00", 1000)), 0o600))
	d.start()
	d.waitPod("ctr", 30*time.Second, running)
	waitForLong(t, 20*time.Second, "containerd's recovery adopting the container", func() bool {
		return strings.Contains(d.log.String(), `msg="adopted running container" pod=default/ctr`)
	})
	after := d.waitPod("ctr", time.Second, running)
	if got, want := after.Status.ContainerStatuses[0].ContainerID, before.Status.ContainerStatuses[0].ContainerID; got != want {
		t.Fatalf("container %s replaced by %s", want, got)
	}
	if now := tasks(); now != taskList {
		t.Fatalf("containerd's tasks changed:\nbefore:\n%s\nafter:\n%s", taskList, now)
	}
	if n := len(ctrContainers(t, ctrd)); n != 1 {
		t.Fatalf("%d containers in containerd, want the one adopted", n)
	}
}

// A rebuilt pod whose manifest went away while the daemon was down is
// stopped like any undesired pod: nothing is left running unsupervised.
func TestRebuiltPodWithoutManifestIsStopped(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("gone.yaml", processPod("gone", "Always", 2, "echo $$$$ > "+d.dir+"/gone.pid; exec sleep 1000"))
	d.waitPod("gone", 10*time.Second, running)
	waitForLong(t, 10*time.Second, "gone.pid written", func() bool { return len(readLines(d.dir+"/gone.pid")) == 1 })
	pid := pidIn(t, d.dir+"/gone.pid")
	d.stop(syscall.SIGKILL)
	d.remove("gone.yaml")
	for _, f := range []string{"state.db", "state.db-wal", "state.db-shm"} {
		os.Remove(filepath.Join(d.data, f))
	}
	d.start()
	d.waitGone("gone", 20*time.Second)
	waitForLong(t, 10*time.Second, "the rebuilt pod's process to end", func() bool { return !alive(pid) })
	waitForLong(t, 10*time.Second, "its shim to end", func() bool { return countShims(t, d) == 0 })
	if dirs, _ := filepath.Glob(filepath.Join(d.data, "containers", "*")); len(dirs) != 0 {
		t.Fatalf("instance directories left: %v", dirs)
	}
}

// A hub pod outlives the loss of state.db, where the hub's document was
// kept too: the rebuilt pod waits for the hub's document (retained at the
// broker) and is adopted when it arrives, not stopped in the meantime.
func TestDamagedStateDatabaseKeepsHubPods(t *testing.T) {
	r := newFleetRig(t)
	d := newDaemon(t)
	d.withConfig(fmt.Sprintf("hub: {url: mqtt://%s, deviceId: e2e-dmg, key: %s, allowProcessPods: true, allowRootProcessPods: true}\n", r.addr, r.pubFile))
	d.start()
	r.apply(t, "e2e-dmg", processPod("hubpod", "Always", 1, "echo $$$$ > "+d.dir+"/hubpod.pid; exec sleep 1000"))
	d.waitPod("hubpod", 20*time.Second, running)
	waitForLong(t, 10*time.Second, "hubpod.pid written", func() bool { return len(readLines(d.dir+"/hubpod.pid")) == 1 })
	pid := pidIn(t, d.dir+"/hubpod.pid")
	waitRecords(t, filepath.Join(d.data, "state.db"), `"phase":"Running"`)
	d.stop(syscall.SIGKILL)
	db := filepath.Join(d.data, "state.db")
	checkpoint(t, db)
	must(t, os.WriteFile(db, []byte(strings.Repeat("junk\xff\x00", 1000)), 0o600))
	d.start()
	p := d.waitPod("hubpod", 20*time.Second, func(p *v1.Pod) bool {
		return running(p) && p.Annotations["podvisor.io/source"] == "hub"
	})
	if !alive(pid) || pidIn(t, d.dir+"/hubpod.pid") != pid {
		t.Fatalf("the hub pod's process %d was not adopted: %s", pid, describePod(p))
	}
	if strings.Contains(d.log.String(), "Killing") {
		t.Fatalf("the hub pod was stopped while its document was on its way:\n%s", d.log)
	}
}

// waitRecords waits until a pod record in the daemon's database contains
// want: the daemon batches its writes.
func waitRecords(t *testing.T, path, want string) {
	t.Helper()
	waitForLong(t, 10*time.Second, "a pod record with "+want+" in "+path, func() bool {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			return false
		}
		defer db.Close()
		var n int
		err = db.QueryRow(`SELECT count(*) FROM pods WHERE instr(record, ?) > 0`, want).Scan(&n)
		return err == nil && n > 0
	})
}
