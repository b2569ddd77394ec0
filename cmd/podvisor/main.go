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

	"github.com/podvisor/podvisor/cmd/internal/helptext"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

const defaultSocket = "/run/podvisor/podvisor.sock"

const usage = `podvisor supervises Kubernetes static pods on this device.

Usage:
  podvisor run [--config FILE] [--manifests DIR] [--data-dir DIR] [--socket PATH]
               [--stop-pods-on-exit] [--hub URL] [--device-id ID] [--hub-key FILE] [--metrics-listen ADDR] [-v]
  podvisor get pods [-o wide|json|yaml] [-n NAMESPACE | -A]
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
  podvisor check-kernel [--config FILE] [--containerd]

Client commands take --socket PATH (default ` + defaultSocket + `), before
or after the command words. 'podvisor COMMAND --help' shows a command's
flags. Errors are one line on stderr, prefixed "error: ", with exit code 1.
`

// synopses are the usage lines --help prints, by flag set name.
var synopses = map[string]string{
	"run":          "run [--config FILE] [--manifests DIR] [--data-dir DIR] [--socket PATH] [--stop-pods-on-exit] [--hub URL] [--device-id ID] [--hub-key FILE] [--metrics-listen ADDR] [-v]",
	"get":          "get pods [NAME] [-o wide|json|yaml] [-n NAMESPACE | -A] | get node [-o json|yaml]",
	"describe":     "describe pod NAME [-n NAMESPACE]",
	"logs":         "logs NAME [-c CONTAINER] [-f] [--previous] [-n NAMESPACE]",
	"top":          "top pods [--containers] [-n NAMESPACE]",
	"drain":        "drain",
	"uncordon":     "uncordon",
	"delete":       "delete pod NAME [--grace-period N] [--force] [-n NAMESPACE]",
	"exec":         "exec NAME [-c CONTAINER] [-i] [-t] -- COMMAND [ARG...]",
	"images":       "images [ls] | images import FILE | images rm NAME...",
	"version":      "version",
	"check-kernel": "check-kernel [--config FILE] [--containerd]",
}

// helpRequest is what a command returns for --help.
type helpRequest = helptext.Help

// helpFor is the usage of the command whose flag set is fs.
func helpFor(fs *flag.FlagSet) helpRequest {
	return helptext.For("podvisor", synopses[fs.Name()], fs)
}

// globalFlags are the flags that may stand before the command words, as
// kubectl takes its global flags; each takes a value.
var globalFlags = map[string]bool{"socket": true, "n": true, "namespace": true}

// hoistGlobalFlags moves global flags given before the command to just
// after the command word, where every command parses them.
func hoistGlobalFlags(args []string) ([]string, error) {
	var global []string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		name := strings.TrimLeft(args[0], "-")
		if name == "h" || name == "help" {
			break
		}
		name, value, hasValue := strings.Cut(name, "=")
		if !globalFlags[name] {
			return nil, fmt.Errorf("unknown global flag %q (global flags: --socket PATH, -n NAMESPACE)", args[0])
		}
		if name == "namespace" {
			name = "n"
		}
		if !hasValue {
			if len(args) < 2 {
				return nil, fmt.Errorf("flag needs an argument: %s", args[0])
			}
			value, args = args[1], args[1:]
		}
		global, args = append(global, "-"+name, value), args[1:]
	}
	if len(global) == 0 || len(args) == 0 {
		return args, nil
	}
	return append(append([]string{args[0]}, global...), args[1:]...), nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr)
}

// runContext runs one command until it ends or ctx is cancelled (Ctrl-C),
// and returns the exit code: 0, or 1 after one line "error: ..." on
// stderr. exec returns its command's exit code.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	args, err := hoistGlobalFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "error: %s\n", err)
		return 1
	}
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	switch args[0] {
	case "shim":
		if len(args) == 3 && args[1] == shim.KeeperFlag {
			signal.Reset()
			return shim.RunKeeper(args[2])
		}
		if len(args) != 2 {
			err = errors.New("usage: podvisor shim DIR (started by the daemon)")
			break
		}
		signal.Reset() // the shim forwards signals to its container
		return shim.Run(args[1])
	case "run":
		err = cmdRun(ctx, args[1:], stderr)
	case "get":
		err = cmdGet(ctx, args[1:], stdout, stderr)
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
	case "check-kernel":
		err = cmdCheckKernel(args[1:], stdout)
	case "exec":
		code, err := cmdExec(ctx, args[1:])
		if h, ok := err.(helpRequest); ok {
			fmt.Fprint(stdout, h.Text)
			return 0
		}
		if err != nil {
			fmt.Fprintf(stderr, "error: %s\n", oneLine(err))
		}
		return code
	case "help", "-h", "--help":
		if len(args) > 1 && synopses[args[1]] != "" {
			return runContext(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q (see podvisor help)", args[0])
	}
	if h, ok := err.(helpRequest); ok {
		fmt.Fprint(stdout, h.Text)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %s\n", oneLine(err))
		return 1
	}
	return 0
}

// oneLine keeps the promise that an error is one line on stderr.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// parseInterspersed parses flags wherever they stand among positional
// arguments, as kubectl users expect ("logs web -f").
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpFor(fs)
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
