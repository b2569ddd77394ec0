package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/sync/hub/api"
)

// podhubServe is a podhub serve the bench runs, its embedded broker on
// addr, with its output kept for a failure's report.
type podhubServe struct {
	cmd    *exec.Cmd
	log    *bytes.Buffer
	client *api.Client
	data   string // its data directory
	addr   string // its broker's host:port
}

// startPodhub makes a podhub data directory, dir/podhub, with podhub init,
// and runs podhub serve on it, with extra flags, until its API answers.
// The caller stops it.
func startPodhub(podhub, dir string, extra ...string) (*podhubServe, error) {
	s := &podhubServe{log: &bytes.Buffer{}, data: filepath.Join(dir, "podhub")}
	if out, err := exec.Command(podhub, "--data-dir", s.data, "init").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("podhub init: %v %s", err, out)
	}
	s.addr = freePort()
	s.cmd = exec.Command(podhub, append([]string{"--data-dir", s.data, "serve", "--mqtt-listen", s.addr}, extra...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.client = api.NewClient(filepath.Join(s.data, "podhub.sock"))
	for i := 0; s.client.Do("GET", "/v1/devices", nil, nil) != nil; i++ {
		if i > 200 {
			s.stop()
			return nil, fmt.Errorf("podhub did not start:\n%s", s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s, nil
}

func (s *podhubServe) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.cmd.Wait()
}

func (s *podhubServe) pid() int { return s.cmd.Process.Pid }
