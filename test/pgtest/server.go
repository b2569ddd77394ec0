package pgtest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
)

// Server is a private PostgreSQL server run outside a test (make
// bench-scale): the same server URL starts for tests, owned by the
// caller, who stops it.
type Server struct{ s *server }

// StartServer starts a private server as URL does (Debian's binaries,
// a temporary data directory, loopback and a unix socket, run as the
// postgres user when root), with settings (name=value) added to its
// command line after the tests' own: later ones win.
func StartServer(settings ...string) (*Server, error) {
	bin, ok := Available()
	if !ok {
		return nil, errors.New("PostgreSQL server not installed (Debian's postgresql: /usr/lib/postgresql/<version>/bin/postgres)")
	}
	s, err := start(bin, settings...)
	if err != nil {
		return nil, fmt.Errorf("starting PostgreSQL from %s: %w", bin, err)
	}
	return &Server{s}, nil
}

// databaseName is what CreateDatabase takes: no quoting needed.
var databaseName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// CreateDatabase makes an empty database name and returns its
// postgres:// URL (loopback TCP, with the password).
func (s *Server) CreateDatabase(name string) (string, error) {
	if !databaseName.MatchString(name) {
		return "", fmt.Errorf("database name %q: want lowercase letters, digits and '_', a letter first", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := s.s.admin.ExecContext(ctx, `CREATE DATABASE `+name+` OWNER `+role); err != nil {
		return "", fmt.Errorf("CREATE DATABASE %s (within %s): %w", name, startTimeout, err)
	}
	return s.s.url(name), nil
}

// Pid is the server's main process (postmaster): its backends are its
// children.
func (s *Server) Pid() int { return s.s.cmd.Process.Pid }

// Stop shuts the server down and removes its directory.
func (s *Server) Stop() error { return s.s.stop() }
