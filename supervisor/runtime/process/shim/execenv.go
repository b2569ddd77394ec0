package shim

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// ExecEnvFlag makes podvisor-shim the first program of a containerd
// container whose environment holds a Secret's data: "podvisor-shim
// --exec-env FILE -- ARGV..." replaces its environment with FILE's (the
// container's whole environment, in order, each variable ending in a NUL)
// and execs ARGV in the same process, so that the Secret's values never
// sit in the OCI spec containerd keeps on disk.
const ExecEnvFlag = "--exec-env"

// maxEnvFile bounds the environment file read (the kernel's own bound on
// an exec's arguments and environment is about this).
const maxEnvFile = 2 << 20

// IsExecEnv reports whether args (without the program name) ask for the
// --exec-env mode.
func IsExecEnv(args []string) bool { return len(args) > 0 && args[0] == ExecEnvFlag }

// ParseEnvFile splits an environment file into its variables.
func ParseEnvFile(data []byte) []string {
	var env []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		if len(kv) > 0 {
			env = append(env, string(kv))
		}
	}
	return env
}

// FormatEnvFile is the environment file of env.
func FormatEnvFile(env []string) []byte {
	var b bytes.Buffer
	for _, kv := range env {
		b.WriteString(kv)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// RunExecEnv runs the --exec-env mode; it returns only on failure, with
// the shell's exit codes for a command not found (127) or not runnable
// (126).
func RunExecEnv(args []string) int {
	if len(args) < 4 || args[0] != ExecEnvFlag || args[2] != "--" {
		fmt.Fprintln(os.Stderr, "usage: podvisor-shim "+ExecEnvFlag+" FILE -- COMMAND [ARG...]")
		return 2
	}
	file, argv := args[1], args[3:]
	data, err := readBounded(file, maxEnvFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podvisor-shim: reading the container's environment: %v\n", err)
		return 126
	}
	env := ParseEnvFile(data)
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
