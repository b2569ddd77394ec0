package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/supervisor/api"
)

var (
	readyOnly   = flag.Bool("ready-only", false, "measure only the daemon's start to READY=1 with -ready-pods adopted")
	readyPods   = flag.Int("ready-pods", 50, "process pods a restarted daemon adopts before READY=1 (0: skip)")
	readyRounds = flag.Int("ready-rounds", 10, "daemon restarts timed to READY=1")
)

// readyBench times a daemon's start-up under systemd's notify protocol:
// a daemon runs pods process pods and is stopped with SIGTERM, leaving
// them; the next one starts with NOTIFY_SOCKET naming a socket the bench
// listens on, and the time from its exec to READY=1 is its start-up with
// every pod adopted. Each round checks that every pod's process runs on
// with its PID (adopted, not restarted).
func readyBench(bin string, pods, rounds int) error {
	dir, err := os.MkdirTemp("", "podvisor-ready")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r := &readyRun{bin: bin, dir: dir, manifests: filepath.Join(dir, "m"), marks: filepath.Join(dir, "marks"),
		socket: filepath.Join(dir, "pv.sock"), notify: filepath.Join(dir, "notify")}
	os.MkdirAll(r.manifests, 0o755)
	os.MkdirAll(r.marks, 0o755)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: r.notify, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	r.conn = conn
	defer r.cleanup()

	for i := range pods {
		name := fmt.Sprintf("ready-%d", i)
		// $$ (written $$$$: Kubernetes expands $$ to $) is the shell that
		// execs sleep: the container's PID.
		content := manifest(name, "echo $$$$ > "+filepath.Join(r.marks, name)+"; exec sleep 100000")
		if err := os.WriteFile(filepath.Join(r.manifests, name+".yaml"), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if _, _, err := r.start(false); err != nil {
		return err
	}
	if err := r.allRunning(pods, 60*time.Second); err != nil {
		return err
	}
	pids, err := r.pids(pods)
	if err != nil {
		return err
	}
	var took []time.Duration
	var apiUp []time.Duration
	for round := range rounds {
		if err := r.stopDaemon(); err != nil {
			return err
		}
		d, up, err := r.start(true)
		if err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
		took, apiUp = append(took, d), append(apiUp, up)
		if err := r.allRunning(pods, 10*time.Second); err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
		if err := r.samePIDs(pids); err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
	}
	fmt.Printf("\n%-44s %8s %8s %8s\n", fmt.Sprintf("daemon start, %d pods adopted (n=%d)", pods, rounds), "p50", "p90", "max")
	printDist("exec -> API answers", apiUp)
	printDist("exec -> READY=1 (sd_notify)", took)
	fmt.Printf("  every round: the %d pods kept their PIDs (adopted, none restarted)\n", pods)
	return nil
}

// readyOnlyBench is -ready-only: the machine, then readyBench.
func readyOnlyBench(bin string, pods, rounds int) error {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	fmt.Printf("podvisor benchmark — %s, %d CPUs, kernel %s, %s\n", cpuModel(), runtime.NumCPU(), kernel(), time.Now().UTC().Format(time.RFC3339))
	return readyBench(abs, pods, rounds)
}

type readyRun struct {
	bin, dir, manifests, marks, socket, notify string
	conn                                       *net.UnixConn
	cmd                                        *exec.Cmd
	log                                        *logBuffer // the current daemon's
}

// start execs a daemon; notified, it names the bench's notify socket and
// waits for READY=1, returning the time from exec to it and to the API's
// first answer (polled every 2 ms beside it).
func (r *readyRun) start(notified bool, extra ...string) (ready, apiUp time.Duration, err error) {
	args := append([]string{"run", "--manifests", r.manifests, "--data-dir", filepath.Join(r.dir, "data"), "--socket", r.socket}, extra...)
	r.cmd = exec.Command(r.bin, args...)
	r.log = &logBuffer{}
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "NOTIFY_SOCKET=") && !strings.HasPrefix(e, "WATCHDOG_") {
			env = append(env, e)
		}
	}
	if notified {
		env = append(env, "NOTIFY_SOCKET="+r.notify)
	}
	r.cmd.Env = env
	client := api.NewClient(r.socket)
	os.Remove(r.socket) // a stale socket would answer nothing, but exists
	at := time.Now()
	if err := r.cmd.Start(); err != nil {
		return 0, 0, err
	}
	upc := make(chan time.Duration, 1)
	go func() {
		for time.Since(at) < 30*time.Second {
			if _, err := client.Version(context.Background()); err == nil {
				upc <- time.Since(at)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		upc <- 0
	}()
	if notified {
		if ready, err = r.awaitReady(at, 30*time.Second); err != nil {
			return 0, 0, err
		}
	}
	if apiUp = <-upc; apiUp == 0 {
		return 0, 0, fmt.Errorf("the daemon's API did not answer within 30 s:\n%s", r.log.String())
	}
	return ready, apiUp, nil
}

// awaitReady reads the notify socket until a message carries READY=1.
func (r *readyRun) awaitReady(at time.Time, within time.Duration) (time.Duration, error) {
	buf := make([]byte, 4096)
	r.conn.SetReadDeadline(at.Add(within))
	for {
		n, err := r.conn.Read(buf)
		if err != nil {
			return 0, fmt.Errorf("no READY=1 within %s: %v\n%s", within, err, r.log.String())
		}
		for line := range strings.SplitSeq(string(buf[:n]), "\n") {
			if line == "READY=1" {
				return time.Since(at), nil
			}
		}
	}
}

// stopDaemon sends SIGTERM, which leaves the pods running, and waits.
func (r *readyRun) stopDaemon() error {
	if r.cmd == nil || r.cmd.ProcessState != nil {
		return nil
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("daemon on SIGTERM: %v\n%s", err, r.log.String())
		}
		return nil
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		<-done
		return fmt.Errorf("the daemon did not stop within 30 s of SIGTERM")
	}
}

// allRunning waits for pods pods to be Running with no restart.
func (r *readyRun) allRunning(pods int, within time.Duration) error {
	client := api.NewClient(r.socket)
	deadline := time.Now().Add(within)
	for {
		list, err := client.Pods(context.Background())
		running := 0
		if err == nil {
			for i := range list.Items {
				p := &list.Items[i]
				if isRunning(p) && p.Status.ContainerStatuses[0].RestartCount == 0 {
					running++
				}
			}
		}
		if running == pods {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d pods running, unrestarted, after %s (%v)", running, pods, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pids reads the PID each pod's container wrote.
func (r *readyRun) pids(pods int) (map[string]int, error) {
	out := map[string]int{}
	for i := range pods {
		name := fmt.Sprintf("ready-%d", i)
		data, err := os.ReadFile(filepath.Join(r.marks, name))
		if err != nil {
			return nil, err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			return nil, fmt.Errorf("%s's pid: %v", name, err)
		}
		out[name] = pid
	}
	return out, nil
}

// samePIDs checks that every pod's container is the process it was: its
// mark not written again (a restart would), the PID running sleep.
func (r *readyRun) samePIDs(want map[string]int) error {
	got, err := r.pids(len(want))
	if err != nil {
		return err
	}
	for name, pid := range want {
		if got[name] != pid {
			return fmt.Errorf("%s restarted: pid %d, was %d", name, got[name], pid)
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Equal(cmdline, []byte("sleep\x00100000\x00")) {
			return fmt.Errorf("%s's process %d is gone (%q)", name, pid, cmdline)
		}
	}
	return nil
}

// cleanup stops the pods: a last daemon with --stop-pods-on-exit adopts
// and stops them.
func (r *readyRun) cleanup() {
	if err := r.stopDaemon(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	}
	if _, _, err := r.start(true, "--stop-pods-on-exit"); err != nil { // READY: every pod adopted, to stop
		fmt.Fprintln(os.Stderr, "bench: cleaning up the pods:", err)
	}
	if err := r.stopDaemon(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	}
}
