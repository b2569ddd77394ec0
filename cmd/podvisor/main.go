// Command podvisor supervises Kubernetes static pods on one device, and is
// the local client of its own daemon.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

const defaultSocket = "/run/podvisor/podvisor.sock"

const usage = `podvisor supervises Kubernetes static pods on this device.

Usage:
  podvisor run [--config FILE] [--manifests DIR] [--data-dir DIR] [--socket PATH]
  podvisor get pods [-o wide|json|yaml] [-n NAMESPACE]
  podvisor get pod NAME [-o wide|json|yaml] [-n NAMESPACE]
  podvisor get node [-o json|yaml]
  podvisor describe pod NAME [-n NAMESPACE]
  podvisor logs NAME [-c CONTAINER] [-f] [--previous] [-n NAMESPACE]
  podvisor top pods [--containers] [-n NAMESPACE]
  podvisor drain | uncordon
  podvisor delete pod NAME [--grace-period N] [--force] [-n NAMESPACE]
  podvisor exec NAME [-c CONTAINER] [-i] [-t] -- COMMAND [ARG...]
  podvisor images [ls] | import FILE | rm NAME...
  podvisor version

Client commands take --socket PATH (default ` + defaultSocket + `).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "shim":
		if len(args) != 2 {
			err = errors.New("usage: podvisor shim DIR (started by the daemon)")
			break
		}
		signal.Reset() // the shim forwards signals to its container
		return shim.Run(args[1])
	case "run":
		err = cmdRun(ctx, args[1:], stderr)
	case "get":
		err = cmdGet(ctx, args[1:], stdout)
	case "describe":
		err = cmdDescribe(ctx, args[1:], stdout)
	case "logs":
		err = cmdLogs(ctx, args[1:], stdout)
	case "drain", "uncordon":
		err = cmdNode(ctx, args[0], args[1:], stdout)
	case "top":
		err = cmdTop(ctx, args[1:], stdout)
	case "delete":
		err = cmdDelete(ctx, args[1:], stdout, stderr)
	case "version":
		err = cmdVersion(ctx, args[1:], stdout)
	case "images":
		err = cmdImages(ctx, args[1:], stdout)
	case "exec":
		code, err := cmdExec(ctx, args[1:])
		if err != nil {
			fmt.Fprintf(stderr, "error: %s\n", err)
		}
		return code
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q (see podvisor help)", args[0])
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "error: %s\n", strings.TrimSpace(err.Error()))
		return 1
	}
	return 0
}

// parseInterspersed parses flags wherever they stand among positional
// arguments, as kubectl users expect ("logs web -f").
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func cmdVersion(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	socket := fs.String("socket", defaultSocket, "daemon socket")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(out, "podvisor %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if v, err := newClient(*socket).Version(ctx); err == nil {
		fmt.Fprintf(out, "daemon   %s (%s, %s)\n", v.Version, v.GoVersion, v.Platform)
	}
	return nil
}

// cmdNode drains the node (stops every pod by priority, lowest first, and
// admits none) or uncordons it.
func cmdNode(ctx context.Context, verb string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	socket := fs.String("socket", defaultSocket, "daemon socket")
	if pos, err := parseInterspersed(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return fmt.Errorf("%s: unexpected argument %q", verb, pos[0])
	}
	c := newClient(*socket)
	if verb == "drain" {
		if err := c.Drain(ctx); err != nil {
			return err
		}
		fmt.Fprintln(out, "node drained: no pod is running; 'podvisor uncordon' admits pods again")
		return nil
	}
	if err := c.Uncordon(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "node uncordoned")
	return nil
}
