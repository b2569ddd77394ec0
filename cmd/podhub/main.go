// Command podhub is the fleet side of podvisor: it serves desired pods to
// devices over MQTT (with an embedded broker, or any external one) and
// keeps their mirror pods, acks and events; its client commands manage
// the fleet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/podvisor/podvisor/cmd/internal/helptext"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

const usage = `podhub serves podvisor devices their pods, and shows the fleet.

Usage:
  podhub [--data-dir DIR] init [--broker-name NAME[,NAME]]
  podhub [--data-dir DIR] serve [--mqtt-listen HOST:PORT | --broker URL] [--device-timeout 90s] [--http-listen HOST:PORT]
        [--store URL] [--replica-id ID] [--leader-lease 15s] [--health-listen HOST:PORT]
  podhub [--data-dir DIR] store copy --to postgres://…
  podhub [--data-dir DIR] device add ID [--out DIR] [--install-dir DIR] [--url URL]
  podhub [--data-dir DIR] device revoke ID
  podhub [--data-dir DIR] token create NAME [--kubeconfig FILE] [--server URL] | token list | token delete NAME
  podhub [--data-dir DIR] user add NAME --kubeconfig FILE [--server URL] | user revoke NAME
  podhub [--data-dir DIR] apply -f FILE [--device ID | --selector k=v[,k=v]]
  podhub [--data-dir DIR] delete pod NAME [--device ID] [-n NAMESPACE]
  podhub [--data-dir DIR] delete deployment|daemonset|statefulset|priorityclass|pdb|configmap|secret NAME [-n NAMESPACE]
  podhub [--data-dir DIR] get devices [-o json|yaml]
  podhub [--data-dir DIR] get pods (-A | --device ID) [-o json|yaml|wide]
  podhub [--data-dir DIR] get deployments|daemonsets|statefulsets|priorityclasses|pdb [-o json|yaml]
  podhub [--data-dir DIR] get configmaps|secrets [NAME] [-n NAMESPACE | -A] [-o json|yaml]
  podhub [--data-dir DIR] get replicas [-o json|yaml]
  podhub [--data-dir DIR] describe device ID | describe deployment|daemonset|statefulset|pdb|configmap|secret NAME [-n NAMESPACE]
  podhub [--data-dir DIR] label device ID k=v|k- ...
  podhub [--data-dir DIR] cordon|uncordon device ID
  podhub [--data-dir DIR] drain device ID [--ignore-daemonsets] [--delete-emptydir-data] [--force] [--disable-eviction] [--timeout D] [--grace-period N]
  podhub [--data-dir DIR] taint device ID k=v:EFFECT|k:EFFECT-|k- ...
  podhub [--data-dir DIR] rollout status|pause|resume|undo|history|restart deployment|daemonset|statefulset/NAME [-n NAMESPACE]
        [--to-revision N] [--revision N] [--watch=false] [--timeout 5m]
  podhub [--data-dir DIR] fence device ID [--remove]
  podhub [--data-dir DIR] logs POD --device ID [-n NAMESPACE] [-c CONTAINER] [--previous] [--tail N] [--since D]
        [--since-time T] [--timestamps] [--limit-bytes N] [-f]
  podhub [--data-dir DIR] release push --version V --file PATH [--file PATH...] [--key FILE]
  podhub [--data-dir DIR] firmware push --name N --version V --file BUNDLE [--compatible S] [--key FILE]
  podhub [--data-dir DIR] update --version V (--device ID | --selector k=v) [--max-unavailable N|N%]
        [--failure-threshold N%] [--allow-downgrade] [--update-name NAME]
  podhub [--data-dir DIR] firmware update --name N --version V (--device ID | --selector k=v) [...as update]
  podhub [--data-dir DIR] update status NAME [--watch=false] [--timeout D]
  podhub [--data-dir DIR] update pause|resume|abort NAME
  podhub [--data-dir DIR] get releases|updates [-o json|yaml]
  podhub [--data-dir DIR] describe release V [--name N] | describe update NAME
  podhub [--data-dir DIR] delete release V [--name N]
  podhub version

'podhub COMMAND --help' shows a command's flags. Errors are one line on
stderr, prefixed "error: ", with exit code 1.

--data-dir (default /var/lib/podhub) holds the keys, the broker's CA
(pki/), the HTTPS listener's tokens (hashed), the fleet database and
the API socket (podhub.sock) that the client commands use. It must be
owned by podhub's user and writable by no one else.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr)
}

// runContext runs one command and returns the exit code: 0, or 1 after
// one line "error: ..." on stderr, as podvisor and kubectl do.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	if h, ok := err.(helpRequest); ok {
		fmt.Fprint(stdout, h.Text)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %s\n", strings.Join(strings.Fields(err.Error()), " "))
		return 1
	}
	return 0
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	dataDir, args, err := globalDataDir(args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return nil
	}
	// Keys, the CA, the database and the bundles are private; files meant
	// to be shared are given their mode explicitly.
	syscall.Umask(0o077)
	c := &cli{dataDir: dataDir, out: stdout, errOut: stderr}
	switch args[0] {
	case "init":
		return c.init(args[1:])
	case "serve":
		return c.serve(ctx, args[1:])
	case "store":
		return c.store(ctx, args[1:])
	case "apply":
		return c.apply(args[1:])
	case "delete":
		return c.delete(args[1:])
	case "get":
		return c.get(args[1:])
	case "describe":
		return c.describe(args[1:])
	case "label":
		return c.label(args[1:])
	case "cordon", "uncordon":
		return c.cordon(args[0], args[1:])
	case "drain":
		return c.drain(ctx, args[1:])
	case "taint":
		return c.taint(args[1:])
	case "rollout":
		return c.rollout(args[1:])
	case "fence":
		return c.fence(args[1:])
	case "logs":
		return c.logs(ctx, args[1:])
	case "release":
		return c.release(args[1:])
	case "firmware":
		return c.firmware(args[1:])
	case "update":
		return c.update(args[1:], "agent")
	case "device":
		return c.device(args[1:])
	case "token":
		return c.token(args[1:])
	case "user":
		return c.user(args[1:])
	case "version":
		fs := flag.NewFlagSet("version", flag.ContinueOnError)
		if pos, err := flags(fs, args[1:]); err != nil {
			return err
		} else if len(pos) > 0 {
			return fmt.Errorf("version: unexpected argument %q", pos[0])
		}
		fmt.Fprintln(stdout, "podhub", version)
		return nil
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && synopses[args[1]] != "" {
			return dispatch(ctx, append(args[1:], "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q (podhub help lists them)", args[0])
}

// globalDataDir takes --data-dir out of the arguments wherever it stands
// (before or after the command words, as kubectl takes global flags).
func globalDataDir(args []string) (string, []string, error) {
	dataDir := "/var/lib/podhub"
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--data-dir" || a == "-data-dir":
			if i+1 == len(args) {
				return "", nil, fmt.Errorf("flag needs an argument: %s", a)
			}
			dataDir, i = args[i+1], i+1
		case strings.HasPrefix(a, "--data-dir=") || strings.HasPrefix(a, "-data-dir="):
			_, dataDir, _ = strings.Cut(a, "=")
		default:
			rest = append(rest, a)
		}
	}
	if dataDir == "" {
		return "", nil, errors.New("--data-dir: empty path")
	}
	return dataDir, rest, nil
}

// synopses are the usage lines --help prints, by flag set name.
var synopses = map[string]string{
	"init":            "init [--broker-name NAME[,NAME]]",
	"serve":           "serve [--mqtt-listen HOST:PORT | --broker URL] [--device-timeout 90s] [--http-listen HOST:PORT] [--store URL] [--replica-id ID] [--leader-lease 15s] [--health-listen HOST:PORT]",
	"store":           "store copy --to postgres://…",
	"store copy":      "store copy --to postgres://…",
	"token":           "token create NAME [--kubeconfig FILE] [--server URL] | token list | token delete NAME",
	"token create":    "token create NAME [--kubeconfig FILE] [--server URL]",
	"token list":      "token list",
	"token delete":    "token delete NAME",
	"user":            "user add NAME --kubeconfig FILE [--server URL] | user revoke NAME",
	"user add":        "user add NAME --kubeconfig FILE [--server URL]",
	"user revoke":     "user revoke NAME",
	"device":          "device add ID [--out DIR] [--install-dir DIR] [--url URL] | device revoke ID",
	"device add":      "device add ID [--out DIR] [--install-dir DIR] [--url URL]",
	"device revoke":   "device revoke ID",
	"apply":           "apply -f FILE [--device ID | --selector k=v[,k=v]]",
	"delete":          "delete pod NAME [--device ID] [-n NAMESPACE] | delete deployment|daemonset|statefulset|priorityclass|pdb|configmap|secret NAME [-n NAMESPACE] | delete release V [--name N]",
	"get":             "get devices [-o json|yaml] | get pods (-A | --device ID) [-o json|yaml|wide] | get deployments|daemonsets|statefulsets|priorityclasses|pdb|releases|updates|replicas | get configmaps|secrets [NAME] [-n NAMESPACE | -A]",
	"describe":        "describe device ID | describe deployment|daemonset|statefulset|pdb|configmap|secret NAME [-n NAMESPACE] | describe release V [--name N] | describe update NAME",
	"label":           "label device ID k=v|k- ...",
	"cordon":          "cordon device ID",
	"uncordon":        "uncordon device ID",
	"drain":           "drain device ID [--ignore-daemonsets] [--delete-emptydir-data] [--force] [--disable-eviction] [--timeout D] [--grace-period N]",
	"taint":           "taint device ID k=v:EFFECT|k:EFFECT-|k- ...",
	"rollout":         "rollout status|pause|resume|undo|history|restart deployment|daemonset|statefulset/NAME [-n NAMESPACE] [--to-revision N] [--revision N] [--watch=false] [--timeout 5m]",
	"fence":           "fence device ID [--remove]",
	"logs":            "logs POD --device ID [-n NAMESPACE] [-c CONTAINER] [--previous] [--tail N] [--since D] [--since-time T] [--timestamps] [--limit-bytes N] [-f]",
	"release":         "release push --version V --file PATH [--file PATH...] [--key FILE]",
	"release push":    "release push --version V --file PATH [--file PATH...] [--key FILE]",
	"firmware":        "firmware push --name N --version V --file BUNDLE [--compatible S] [--key FILE] | firmware update --name N --version V (--device ID | --selector k=v) [...]",
	"firmware push":   "firmware push --name N --version V --file BUNDLE [--compatible S] [--key FILE]",
	"update":          "update --version V (--device ID | --selector k=v) [--max-unavailable N|N%] [--failure-threshold N%] [--allow-downgrade] | update status|pause|resume|abort NAME",
	"update status":   "update status NAME [--watch=false] [--timeout D]",
	"firmware update": "firmware update --name N --version V (--device ID | --selector k=v) [--max-unavailable N|N%] [--failure-threshold N%] [--allow-downgrade]",
	"version":         "version",
}

// helpRequest is what a command returns for --help.
type helpRequest = helptext.Help

// helpFor is the usage of the command whose flag set is fs.
func helpFor(fs *flag.FlagSet) helpRequest {
	return helptext.For("podhub [--data-dir DIR]", synopses[fs.Name()], fs)
}

// oneName parses a command's flags and its one positional argument (a
// name or ID), and readies the data directory it works in.
func (c *cli) oneName(fs *flag.FlagSet, args []string, usage string) (string, error) {
	pos, err := flags(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", errors.New("usage: " + usage)
	}
	return pos[0], prepareDataDir(c.dataDir, false)
}

// verb is one verb of a command with verbs (podhub device add|revoke).
type verb struct {
	name string
	run  func(args []string) error
}

// runVerb runs the verb args[0] of command with the rest of args; --help
// prints the command's help, and no or an unknown verb is an error
// naming the verbs there are.
func runVerb(command, usage string, args []string, verbs ...verb) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		return helpFor(flag.NewFlagSet(command, flag.ContinueOnError))
	}
	if len(args) == 0 {
		return errors.New("usage: " + usage)
	}
	names := make([]string, len(verbs))
	for i, v := range verbs {
		if v.name == args[0] {
			return v.run(args[1:])
		}
		names[i] = v.name
	}
	want := names[len(names)-1]
	if len(names) > 1 {
		want = strings.Join(names[:len(names)-1], ", ") + " or " + want
	}
	return fmt.Errorf("%s %q: want %s", command, args[0], want)
}

type cli struct {
	dataDir     string
	out, errOut io.Writer
}

func (c *cli) path(name string) string { return filepath.Join(c.dataDir, name) }

// flags parses a command's flags wherever they stand among its
// arguments, and returns the others.
func flags(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard) // the error is returned, and printed once
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpFor(fs)
			}
			return nil, fmt.Errorf("%s: %w", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}
