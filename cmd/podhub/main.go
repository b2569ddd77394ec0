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
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

const usage = `podhub serves podvisor devices their pods, and shows the fleet.

Usage:
  podhub [--data-dir DIR] init [--broker-name NAME[,NAME]]
  podhub [--data-dir DIR] serve [--mqtt-listen HOST:PORT | --broker URL] [--device-timeout 90s]
  podhub [--data-dir DIR] device add ID [--out DIR] [--install-dir DIR] [--url URL]
  podhub [--data-dir DIR] device revoke ID
  podhub [--data-dir DIR] apply -f FILE (--device ID | --selector k=v[,k=v])
  podhub [--data-dir DIR] delete pod NAME --device ID [-n NAMESPACE]
  podhub [--data-dir DIR] get devices [-o json]
  podhub [--data-dir DIR] get pods (-A | --device ID) [-o json|yaml]
  podhub [--data-dir DIR] describe device ID
  podhub [--data-dir DIR] label device ID k=v|k- ...
  podhub version

--data-dir (default /var/lib/podhub) holds the keys, the broker's CA
(pki/), the fleet database and the API socket (podhub.sock) that the
client commands use. It must be owned by podhub's user and writable by
no one else.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	dataDir := "/var/lib/podhub"
	if len(args) >= 2 && (args[0] == "--data-dir" || args[0] == "-data-dir") {
		dataDir, args = args[1], args[2:]
	} else if len(args) >= 1 && strings.HasPrefix(args[0], "--data-dir=") {
		dataDir, args = strings.TrimPrefix(args[0], "--data-dir="), args[1:]
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	// Keys, the CA, the database and the bundles are private; files meant
	// to be shared are given their mode explicitly.
	syscall.Umask(0o077)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &cli{dataDir: dataDir, out: stdout, errOut: stderr}
	var err error
	switch args[0] {
	case "init":
		err = c.init(args[1:])
	case "serve":
		err = c.serve(ctx, args[1:])
	case "apply":
		err = c.apply(args[1:])
	case "delete":
		err = c.delete(args[1:])
	case "get":
		err = c.get(args[1:])
	case "describe":
		err = c.describe(args[1:])
	case "label":
		err = c.label(args[1:])
	case "device":
		err = c.device(args[1:])
	case "version":
		fmt.Fprintln(stdout, "podhub", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		err = fmt.Errorf("unknown command %q (podhub help lists them)", args[0])
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 2
		}
		fmt.Fprintln(stderr, "podhub:", err)
		return 1
	}
	return 0
}

type cli struct {
	dataDir     string
	out, errOut io.Writer
}

func (c *cli) path(name string) string { return filepath.Join(c.dataDir, name) }

// flags parses a command's flags wherever they stand among its
// arguments, and returns the others.
func flags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}
