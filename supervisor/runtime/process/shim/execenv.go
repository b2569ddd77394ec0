package shim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// ExecEnvFlag makes podvisor-shim the first program of a containerd
// container whose environment holds a Secret's data: "podvisor-shim
// --exec-env FILE" execs, in the same process, the command and
// environment FILE holds, so that the Secret's values (in its environment
// and maybe, expanded, its command) never sit in the OCI spec containerd
// keeps on disk. FILE (ParseEnvFile) is on a memory-backed file system.
const ExecEnvFlag = "--exec-env"

// maxEnvFile bounds the file read (the kernel's own bound on an exec's
// arguments and environment is about this).
const maxEnvFile = 2 << 20

// IsExecEnv reports whether args (without the program name) ask for the
// --exec-env mode.
func IsExecEnv(args []string) bool { return len(args) > 0 && args[0] == ExecEnvFlag }

// ParseEnvFile reads an environment file: the environment's variables
// then the command's arguments, each ending in a NUL, an empty entry
// between the two (a variable is never empty, an argument may be).
func ParseEnvFile(data []byte) (env, argv []string, err error) {
	if len(data) == 0 || data[len(data)-1] != 0 {
		return nil, nil, errors.New("not an environment file: it does not end in a NUL")
	}
	entries := strings.Split(string(data[:len(data)-1]), "\x00")
	for i, e := range entries {
		if e == "" {
			return env, entries[i+1:], nil
		}
		env = append(env, e)
	}
	return nil, nil, errors.New("not an environment file: no end to its environment")
}

// FormatEnvFile is the environment file of env and argv.
func FormatEnvFile(env, argv []string) []byte {
	var b bytes.Buffer
	for _, kv := range env {
		b.WriteString(kv)
		b.WriteByte(0)
	}
	b.WriteByte(0)
	for _, a := range argv {
		b.WriteString(a)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// RunExecEnv runs the --exec-env mode; it returns only on failure, with
// the shell's exit codes for a command not found (127) or not runnable
// (126).
func RunExecEnv(args []string) int {
	if len(args) != 2 || args[0] != ExecEnvFlag {
		fmt.Fprintln(os.Stderr, "usage: podvisor-shim "+ExecEnvFlag+" FILE")
		return 2
	}
	data, err := readBounded(args[1], maxEnvFile)
	var env, argv []string
	if err == nil {
		env, argv, err = ParseEnvFile(data)
	}
	if err == nil && len(argv) == 0 {
		err = errors.New("no command")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "podvisor-shim: the container's command and environment: %v\n", err)
		return 126
	}
	env = withHome(env, os.Getenv("HOME"))
	// As runc does: the command is looked up in the container's PATH.
	os.Clearenv()
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "exec: %q: %v\n", argv[0], unwrapExecErr(err))
		return 127
	}
	err = unix.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "exec %s: %v\n", argv[0], err)
	return 126
}

// withHome adds the HOME runc gave this process (the user's home) where
// the environment sets none, as runc does for the command it starts.
func withHome(env []string, home string) []string {
	if home == "" {
		return env
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "HOME=") {
			return env
		}
	}
	return append(env, "HOME="+home)
}

func unwrapExecErr(err error) error {
	if e, ok := err.(*exec.Error); ok {
		return e.Err
	}
	return err
}

func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(data)) > max {
		err = fmt.Errorf("%s: over %d bytes", path, max)
	}
	return data, err
}
