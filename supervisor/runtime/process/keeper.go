package process

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// keepers is the daemon's side of the keeper: one process per data
// directory that runs every container (shim.RunKeeper). The daemon starts
// it on first need, watches it on one connection (one goroutine per
// keeper, not per instance) and adopts it after a restart from the
// instances' shim.json.
type keepers struct {
	r       *Runtime
	cmd     []string // the keeper command
	version string   // of the binary the daemon would start
	socket  string   // the current version's socket

	// guarded by r.mu
	watched map[string]*keeperConn // by socket
	current *keeperConn
	starter chan struct{} // one start of a keeper at a time
}

// keeperConn is a watched keeper.
type keeperConn struct {
	socket string
	pid    int
	start  uint64
	// guarded by Runtime.mu
	live  map[string]bool // instances it ran when first watched
	ended map[string]bool // exits seen for instances not (yet) registered
	gone  bool
}

func newKeepers(r *Runtime) *keepers {
	return &keepers{r: r, watched: map[string]*keeperConn{}, starter: make(chan struct{}, 1)}
}

// EnableKeeper makes the runtime start containers through a keeper
// ("SHIM --keeper DIR") instead of one shim each. Placed starts (the
// systemd cgroup driver) still get their own shim. Instances a keeper
// runs are adopted whether or not it is enabled.
func (r *Runtime) EnableKeeper() error {
	if filepath.Base(r.dir) != shim.InstancesDir {
		return fmt.Errorf("a keeper needs its instances in a directory named %s, not %s", shim.InstancesDir, r.dir)
	}
	version, err := shim.KeeperVersion(r.shimCmd[0])
	if err != nil {
		return fmt.Errorf("keeper version: %w", err)
	}
	ks := r.keepers
	ks.version, ks.socket = version, shim.KeeperSocket(ks.dataDir(), version)
	ks.cmd = append(append([]string{}, r.shimCmd...), shim.KeeperFlag, ks.dataDir())
	r.keeperOn = true
	return nil
}

// ensure returns the current version's keeper, starting it if needed, and
// tells every older keeper to drain.
func (ks *keepers) ensure() (*keeperConn, error) {
	ks.starter <- struct{}{}
	defer func() { <-ks.starter }()
	ks.r.mu.Lock()
	kc := ks.current
	ks.r.mu.Unlock()
	if kc != nil && !kc.goneNow(ks.r) {
		return kc, nil
	}
	kc, err := ks.watch(ks.socket, 0, 0)
	if err == nil && ks.r.keeperOn {
		// Another version's daemon may have drained it; ours serves on.
		if _, err = ks.request(ks.socket, shim.KeeperRequest{Op: shim.KeeperResume}); err != nil {
			ks.r.log.Warn("the keeper of this version does not take starts again", "socket", ks.socket, "err", err)
		}
	}
	if err != nil {
		if kc, err = ks.launch(); err != nil {
			return nil, err
		}
	}
	ks.r.mu.Lock()
	ks.current = kc
	ks.r.mu.Unlock()
	ks.drainOthers()
	return kc, nil
}

// dataDir is the keeper's directory: the one holding the instances'.
func (ks *keepers) dataDir() string { return filepath.Dir(ks.r.dir) }

func (kc *keeperConn) goneNow(r *Runtime) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return kc.gone
}

// launch starts a keeper in its own session (it outlives the daemon) and
// waits until its socket answers.
func (ks *keepers) launch() (*keeperConn, error) {
	logPath := filepath.Join(ks.dataDir(), "keeper.log")
	rotateLog(logPath, keeperLogMax)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(ks.cmd[0], ks.cmd[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting keeper: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() // the daemon's child until it restarts
	deadline := time.Now().Add(StartTimeout)
	for wait := time.Millisecond; time.Now().Before(deadline); wait = min(2*wait, 50*time.Millisecond) {
		kc, err := ks.watch(ks.socket, 0, 0)
		if err == nil {
			ks.r.log.Info("keeper started", "pid", kc.pid, "socket", ks.socket)
			return kc, nil
		}
		select {
		case <-exited:
			if kc, err2 := ks.watch(ks.socket, 0, 0); err2 == nil {
				return kc, nil // another keeper of this version answered
			}
			return nil, fmt.Errorf("keeper exited (%v) before it answered; see %s", cmd.ProcessState, filepath.Join(ks.dataDir(), "keeper.log"))
		case <-time.After(wait):
		}
	}
	cmd.Process.Kill() // holds no container yet
	return nil, fmt.Errorf("keeper did not answer on %s within %v", ks.socket, StartTimeout)
}

// drainOthers tells every keeper of another version to take no more starts
// and to exit with its last container.
func (ks *keepers) drainOthers() {
	socks, _ := filepath.Glob(filepath.Join(ks.dataDir(), "keeper-*.sock"))
	for _, s := range socks {
		if s == ks.socket {
			continue
		}
		if _, err := ks.request(s, shim.KeeperRequest{Op: shim.KeeperDrain}); err != nil {
			ks.r.log.Debug("draining an older keeper", "socket", s, "err", err)
		}
	}
	ks.removeDeadVersions()
}

// request sends one request to the keeper at socket and reads its reply.
func (ks *keepers) request(socket string, req shim.KeeperRequest, fds ...int) (shim.KeeperReply, error) {
	var rep shim.KeeperReply
	c, _, err := shim.DialKeeper(socket)
	if err != nil {
		return rep, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(StartTimeout))
	if err := shim.SendKeeper(c, req, fds...); err != nil {
		return rep, err
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return rep, fmt.Errorf("keeper %s did not answer %s: %w", socket, req.Op, err)
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		return rep, fmt.Errorf("keeper %s: %w", socket, err)
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

// watch returns the watched keeper at socket, watching it first if need
// be; a non-zero pid must be the process serving it.
func (ks *keepers) watch(socket string, pid int, start uint64) (*keeperConn, error) {
	ks.r.mu.Lock()
	kc := ks.watched[socket]
	ks.r.mu.Unlock()
	if kc != nil && !kc.goneNow(ks.r) && (pid == 0 || kc.pid == pid && kc.start == start) {
		return kc, nil
	}
	c, rd, live, cred, err := ks.openWatch(socket)
	if err != nil {
		return nil, err
	}
	kc = &keeperConn{socket: socket, pid: int(cred.Pid), live: map[string]bool{}, ended: map[string]bool{}}
	kc.start, _ = shim.ProcStartTime(kc.pid)
	if pid != 0 && (kc.pid != pid || kc.start != start) {
		c.Close()
		return nil, fmt.Errorf("keeper socket %s is served by pid %d, not the keeper %d that ran the instance", socket, kc.pid, pid)
	}
	for _, id := range live {
		kc.live[id] = true
	}
	ks.r.mu.Lock()
	ks.watched[socket] = kc
	ks.r.mu.Unlock()
	go ks.follow(kc, c, rd)
	return kc, nil
}

func (ks *keepers) openWatch(socket string) (*net.UnixConn, *bufio.Reader, []string, *unix.Ucred, error) {
	c, cred, err := shim.DialKeeper(socket)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	c.SetDeadline(time.Now().Add(StartTimeout))
	if err := shim.SendKeeper(c, shim.KeeperRequest{Op: shim.KeeperWatch}); err != nil {
		c.Close()
		return nil, nil, nil, nil, err
	}
	rd := bufio.NewReader(c)
	var rep shim.KeeperReply
	line, err := rd.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	if err == nil && rep.Error != "" {
		err = errors.New(rep.Error)
	}
	if err != nil {
		c.Close()
		return nil, nil, nil, nil, fmt.Errorf("watching keeper %s: %w", socket, err)
	}
	c.SetDeadline(time.Time{})
	return c, rd, rep.Live, cred, nil
}

// follow reads a keeper's exits until it goes, then settles every
// instance it still ran: a keeper that dies takes its containers along.
func (ks *keepers) follow(kc *keeperConn, c *net.UnixConn, rd *bufio.Reader) {
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			c.Close()
			// The keeper drops a watcher that does not read; while it
			// lives, watch again and settle what ended meanwhile.
			if c, rd, err = ks.rewatchWhileAlive(kc); err != nil {
				break
			}
			continue
		}
		var ev shim.KeeperReply
		if json.Unmarshal(line, &ev) == nil && ev.Exited != "" {
			ks.r.keeperExited(kc, ev.Exited)
		}
	}
	if fd, err := pidfd.Open(kc.pid, kc.start); err == nil {
		pidfd.Wait(fd) // its locks are free once it is gone
	}
	ks.r.mu.Lock()
	kc.gone = true
	var ended []string
	for id, in := range ks.r.live {
		if in.keeper == kc && !in.starting {
			delete(ks.r.live, id)
			ended = append(ended, id)
		}
	}
	ks.r.mu.Unlock()
	if len(ended) > 0 {
		ks.r.log.Warn("keeper gone; its containers ended with it", "pid", kc.pid, "instances", len(ended))
	}
	for _, id := range ended {
		ks.r.exits <- exitOf(id, ks.r.exitStatus(id))
	}
}

// rewatchWhileAlive watches a keeper again, retrying while it lives: one
// failed attempt (descriptors short, the keeper's accept loop backing off)
// must not leave its containers' exits unheard for the rest of its life.
func (ks *keepers) rewatchWhileAlive(kc *keeperConn) (*net.UnixConn, *bufio.Reader, error) {
	fd, err := pidfd.Open(kc.pid, kc.start)
	if err != nil {
		return nil, nil, err // gone
	}
	defer unix.Close(fd)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, maxRewatchWait) {
		c, rd, err := ks.rewatch(kc)
		if err == nil {
			return c, rd, nil
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, perr := unix.Poll(pfd, int(wait.Milliseconds())); n > 0 || (perr != nil && !errors.Is(perr, unix.EINTR)) {
			return nil, nil, err // it exited (or cannot be waited for)
		}
		ks.r.log.Debug("watching the keeper again", "socket", kc.socket, "err", err)
	}
}

// maxRewatchWait is the longest pause between attempts to watch a live
// keeper again.
const maxRewatchWait = 2 * time.Second

func (ks *keepers) rewatch(kc *keeperConn) (*net.UnixConn, *bufio.Reader, error) {
	c, rd, live, cred, err := ks.openWatch(kc.socket)
	if err != nil {
		return nil, nil, err
	}
	if int(cred.Pid) != kc.pid {
		c.Close()
		return nil, nil, errors.New("another keeper")
	}
	alive := map[string]bool{}
	for _, id := range live {
		alive[id] = true
	}
	ks.r.mu.Lock()
	var ended []string
	for id, in := range ks.r.live {
		if in.keeper == kc && !in.starting && !alive[id] {
			ended = append(ended, id)
		}
	}
	ks.r.mu.Unlock()
	for _, id := range ended {
		ks.r.keeperExited(kc, id)
	}
	return c, rd, nil
}

// keeperExited reports the end of an instance the keeper finished.
func (r *Runtime) keeperExited(kc *keeperConn, id string) {
	r.mu.Lock()
	in := r.live[id]
	switch {
	case in != nil && in.keeper == kc && in.starting:
		kc.ended[id] = true // startKept reports it once answered
		r.mu.Unlock()
		return
	case in == nil || in.keeper != kc:
		// Not (yet) adopted: adoptKept finds it no longer live. Anything
		// else (a failed start settled already) is nobody's to report,
		// and is not kept: one entry per failure would pile up.
		delete(kc.live, id)
		r.mu.Unlock()
		return
	}
	delete(r.live, id)
	r.mu.Unlock()
	r.exits <- exitOf(id, r.exitStatus(id))
}

// startKept runs an instance through the keeper: the lock, taken by the
// caller, is handed over with the request and closed here.
func (r *Runtime) startKept(spec shim.Spec, lock *os.File) (time.Time, error) {
	defer lock.Close() // the keeper holds it now, or nobody
	id := spec.InstanceID
	for attempt := 0; ; attempt++ {
		kc, err := r.keepers.ensure()
		if err != nil {
			return time.Time{}, err
		}
		in := &instance{id: id, keeper: kc, starting: true, pidfd: -1}
		r.mu.Lock()
		r.live[id] = in
		r.mu.Unlock()
		rep, err := r.keepers.request(kc.socket, shim.KeeperRequest{Op: shim.KeeperStart, Instance: id}, int(lock.Fd()))
		if err != nil && err.Error() == shim.KeeperRefused && attempt == 0 {
			// It was exiting as we asked, before it forked: our copy of
			// the lock still holds it; go to a new keeper.
			r.mu.Lock()
			delete(r.live, id)
			r.keepers.forget(kc)
			r.mu.Unlock()
			continue
		}
		lock.Close()
		if err != nil || rep.Started == nil {
			if err == nil {
				err = errors.New("keeper reported no start")
			}
			r.settleFailedStart(kc, id)
			return time.Time{}, err
		}
		r.mu.Lock()
		in.starting = false
		endedAlready := kc.ended[id] || kc.gone
		if endedAlready {
			delete(kc.ended, id)
			delete(r.live, id)
		}
		r.mu.Unlock()
		if endedAlready {
			go func() { r.exits <- exitOf(id, r.exitStatus(id)) }()
		}
		return rep.Started.StartedAt, nil
	}
}

// forget stops using a keeper that refuses starts; r.mu held.
func (ks *keepers) forget(kc *keeperConn) {
	if ks.current == kc {
		ks.current = nil
	}
	if ks.watched[kc.socket] == kc {
		delete(ks.watched, kc.socket)
	}
}

// settleFailedStart makes sure an instance whose start got no clear answer
// does not run: asked to die, its lock must come free.
func (r *Runtime) settleFailedStart(kc *keeperConn, id string) {
	defer func() {
		r.mu.Lock()
		delete(r.live, id)
		delete(kc.ended, id)
		r.mu.Unlock()
	}()
	lock, err := os.OpenFile(filepath.Join(r.instanceDir(id), shim.LockFile), os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer lock.Close()
	if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		return
	}
	r.keepers.request(kc.socket, shim.KeeperRequest{Op: shim.KeeperSignal, Instance: id, Signal: int(shim.KillSignal)})
	for wait := time.Millisecond; wait < 10*time.Second; wait *= 2 {
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			return
		}
		time.Sleep(wait)
	}
	r.log.Error("an instance whose start failed stays locked by its keeper", "instance", id)
}

// adoptKept adopts an instance its keeper runs (ss from its shim.json):
// alive reports whether it still runs; if not, its exit is recorded.
func (r *Runtime) adoptKept(id string, ss shim.State) (in *instance, alive bool, err error) {
	kc, err := r.keepers.watch(ss.Keeper, ss.ShimPid, ss.ShimStart)
	if err != nil {
		return nil, false, err
	}
	if !r.keeperOn {
		// Keepers were turned off: this one ends with its last container.
		r.keepers.request(kc.socket, shim.KeeperRequest{Op: shim.KeeperDrain})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !kc.live[id] { // its exit came before
		return nil, false, nil
	}
	delete(kc.live, id) // followed in r.live from now on
	in = &instance{id: id, keeper: kc, pidfd: -1}
	r.live[id] = in
	return in, true, nil
}

// signalKept asks the keeper to signal an instance's leader.
func (r *Runtime) signalKept(in *instance, sig syscall.Signal) error {
	_, err := r.keepers.request(in.keeper.socket, shim.KeeperRequest{Op: shim.KeeperSignal, Instance: in.id, Signal: int(sig)})
	if err != nil {
		return fmt.Errorf("signal %v to instance %s: %w", sig, in.id, err)
	}
	return nil
}
