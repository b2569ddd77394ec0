// Package pgtest gives tests a PostgreSQL database of their own: one
// private server per test binary, from Debian's binaries
// (/usr/lib/postgresql/<version>/bin), in a temporary data directory,
// listening on a unix socket there and on a free loopback port; a fresh
// database per test (CREATE DATABASE), dropped when the test ends. The
// server starts on first use and stops, its directory removed, when the
// package's TestMain (Main) returns. Without PostgreSQL a test skips, or
// fails under CI=true (test/prereq).
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for the admin connection

	"github.com/podvisor/podvisor/test/prereq"
)

// Bounds on the server's start and stop (two shared cores under load).
const (
	startTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
)

// user is the role the tests connect as, with a password, so that the
// URLs carry one as a production store's do.
const role = "podhub"

var (
	mu      sync.Mutex
	running *server
	failed  error // the first start's failure, given to every test after it
	inMain  bool
	dbSeq   int
)

type server struct {
	dir      string // the data directory's parent: removed at stop
	data     string
	port     int
	password string
	cmd      *exec.Cmd
	exited   chan error // the server's exit, once
	log      *os.File
	admin    *sql.DB
	settings []string // more -c settings of the server (Server's)
}

// Main runs the package's tests and then stops the server if one was
// started: call it from TestMain.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) { MainThen(m, nil) }

// MainThen is Main with the package's own cleanup, after (temporary
// binaries its TestMain built), run once the tests ended, before the
// exit (which skips TestMain's deferred calls).
func MainThen(m *testing.M, after func()) {
	mu.Lock()
	inMain = true
	mu.Unlock()
	code := m.Run()
	if after != nil {
		after()
	}
	mu.Lock()
	if running != nil {
		if err := running.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			if code == 0 {
				code = 1
			}
		}
		running = nil
	}
	mu.Unlock()
	os.Exit(code)
}

// Available reports whether Debian's PostgreSQL server binaries are
// installed (the bin directory of the newest version), without starting
// anything.
func Available() (bin string, ok bool) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				return d, true
			}
		}
	}
	return "", false
}

func versionOf(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

// URL is a postgres:// URL (over loopback TCP, with a password) of a
// fresh, empty database for t alone, dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	bin, ok := Available()
	if !ok {
		prereq.Missing(t, "PostgreSQL server (Debian's postgresql: /usr/lib/postgresql/<version>/bin/postgres)")
	}
	mu.Lock()
	defer mu.Unlock()
	if !inMain {
		t.Fatal("pgtest: the package's TestMain must call pgtest.Main (it stops the server)")
	}
	if failed != nil {
		t.Fatalf("pgtest: the PostgreSQL server did not start: %v", failed)
	}
	if running == nil {
		s, err := start(bin)
		if err != nil {
			failed = err
			t.Fatalf("pgtest: starting PostgreSQL from %s: %v", bin, err)
		}
		running = s
	}
	dbSeq++
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := running.admin.ExecContext(ctx, `CREATE DATABASE `+name+` OWNER `+role); err != nil {
		t.Fatalf("pgtest: CREATE DATABASE %s (within %s): %v", name, startTimeout, err)
	}
	s := running
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if _, err := s.admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("pgtest: DROP DATABASE %s (within %s): %v", name, stopTimeout, err)
		}
	})
	return s.url(name)
}

func (s *server) url(database string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(role, s.password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

// start makes a data directory, and runs the server in it until stop.
// As root it runs as the postgres system user, since PostgreSQL refuses
// to run as root.
func start(bin string, settings ...string) (_ *server, err error) {
	cred, uid, gid, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "podvisor-pgtest-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, data: filepath.Join(dir, "data"), settings: settings}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if cred != nil {
		if err := reachable(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	}
	var pw [12]byte
	rand.Read(pw[:])
	s.password = hex.EncodeToString(pw[:])
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{dir, pwfile} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.data, "-U", role, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := runBounded(initdb, startTimeout); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// The port is free when asked; another process may take it before
	// the server binds, so a failed bind tries another, three times.
	for try := 0; ; try++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = s.run(bin, cred, uid, gid); err == nil {
			break
		}
		if try == 2 {
			return nil, err
		}
	}
	return s, nil
}

// run starts the server on s.port and waits until it answers on its
// socket.
func (s *server) run(bin string, cred *syscall.Credential, uid, gid int) error {
	logPath := filepath.Join(s.dir, fmt.Sprintf("postgres-%d.log", s.port))
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	if cred != nil {
		os.Chown(logPath, uid, gid)
	}
	args := []string{"-D", s.data, "-k", s.dir, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "shared_buffers=16MB", "-c", "max_connections=60"}
	for _, kv := range s.settings {
		args = append(args, "-c", kv)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = s.dir
	// Its own process group, and SIGINT (fast shutdown) should the test
	// binary die without stopping it. Pdeathsig follows the thread that
	// started the server, not the process: that thread is locked to the
	// goroutine that waits for the server, so it lives exactly as long.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGINT}
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, after the server
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		log.Close()
		return err
	}
	admin, err := sql.Open("pgx", fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable connect_timeout=5", s.dir, s.port, role))
	if err != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		log.Close()
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-exited:
			admin.Close()
			log.Close()
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited before it answered on port %d: %v\n%s", s.port, err, out)
		case <-time.After(100 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := admin.PingContext(ctx)
		cancel()
		if err == nil {
			s.cmd, s.exited, s.log, s.admin = cmd, exited, log, admin
			return nil
		}
		if time.Now().After(deadline) {
			admin.Close()
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			log.Close()
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres did not answer on its socket in %s within %s (last: %v)\n%s", s.dir, startTimeout, err, out)
		}
	}
}

// stop shuts the server down (fast shutdown, then SIGKILL after
// stopTimeout) and removes its directory.
func (s *server) stop() error {
	var errs []error
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.exited
			errs = append(errs, fmt.Errorf("postgres did not stop within %s of SIGINT: killed", stopTimeout))
		}
		s.log.Close()
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// credential is the postgres system user's, when running as root (nil
// otherwise: the server runs as the test's own user).
func credential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, os.Getuid(), os.Getgid(), nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("running as root, PostgreSQL needs an unprivileged user: %w (Debian's postgresql package makes the postgres user)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}

// reachable checks that another user (the postgres user) can pass
// through every directory down to dir: a TMPDIR under /root would stop
// the server at its first file, with a less clear error.
func reachable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the postgres user cannot pass through %s (mode %v) to the data directory under %s: set TMPDIR to a directory it reaches", d, fi.Mode().Perm(), dir)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// freePort is a loopback TCP port free when asked.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runBounded runs cmd, killing it after limit.
func runBounded(cmd *exec.Cmd, limit time.Duration) ([]byte, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return []byte(out.String()), err
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		return []byte(out.String()), fmt.Errorf("%s did not finish within %s", filepath.Base(cmd.Path), limit)
	}
}

// stores are the PostgreSQL stores of EachStore's subtests, by test name.
var stores sync.Map

// EachStore runs fn as two subtests, one per kind of fleet store:
// "sqlite" and "postgres" (skipped, or failed under CI=true, without
// PostgreSQL). fn opens the store Store names for its test, so the
// same test body checks both stores:
//
//	func TestX(t *testing.T) { pgtest.EachStore(t, testX) }
func EachStore(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	t.Run("sqlite", fn)
	t.Run("postgres", func(t *testing.T) {
		stores.Store(t.Name(), URL(t))
		t.Cleanup(func() { stores.Delete(t.Name()) })
		fn(t)
	})
}

// Store is the fleet store t is to open (fleetdb.OpenStore): within
// EachStore's postgres subtest (or a subtest of it) the URL of its fresh
// PostgreSQL database, anywhere else the path of a new SQLite file in a
// temporary directory. A test that opens its store twice keeps what the
// first call returned.
func Store(t testing.TB) string {
	for name := t.Name(); ; {
		if u, ok := stores.Load(name); ok {
			return u.(string)
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			break
		}
		name = name[:i]
	}
	return filepath.Join(t.TempDir(), "fleet.db")
}
