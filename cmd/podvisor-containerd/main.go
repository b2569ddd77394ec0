// Command podvisor-containerd is podvisor's containerd runtime plugin. The
// daemon starts it ("podvisor-containerd serve …") and calls it over its
// stdin and stdout; "podvisor exec" runs "podvisor-containerd exec …" to
// attach a terminal to a command in a container. It is a separate binary
// so that containerd's client, which is large, costs nothing on devices
// that run only process pods.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/rpc"
	"net/rpc/jsonrpc"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/plugin"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

const usage = `usage:
  podvisor-containerd serve --address SOCKET [--snapshotter S] [--runtime R] [--auth-file F] [--certs-dir D]
  podvisor-containerd exec --address SOCKET [-i] [-t] CONTAINER-ID -- COMMAND [ARG...]
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	code := 0
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "exec":
		code, err = execCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q\n%s", os.Args[1], usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "podvisor-containerd:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func connect(fs *flag.FlagSet, args []string, cfg *plugin.Config) ([]string, *plugin.Plugin, error) {
	fs.StringVar(&cfg.Address, "address", "/run/containerd/containerd.sock", "containerd socket")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	p, err := plugin.New(*cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "containerd"))
	return fs.Args(), p, err
}

// serve answers the daemon until it closes stdin.
func serve(args []string) error {
	if os.Getenv("GOGC") == "" {
		// As the daemon does: the plugin mostly waits for events, and
		// collecting at 50% growth keeps its heap ~2 MiB smaller
		// (docs/footprint.md).
		debug.SetGCPercent(50)
	}
	var cfg plugin.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&cfg.Snapshotter, "snapshotter", "", "snapshotter (default: containerd's)")
	fs.StringVar(&cfg.Runtime, "runtime", "", "runtime (default io.containerd.runc.v2)")
	fs.StringVar(&cfg.AuthFile, "auth-file", "", "docker config.json with registry credentials")
	fs.StringVar(&cfg.CertsDir, "certs-dir", "/etc/containerd/certs.d", "registries' CAs: HOST[:PORT]/*.crt, trusted for that registry")
	fs.StringVar(&cfg.RuncRoot, "runc-root", "", "runc state directory (default: the shim's)")
	fs.BoolVar(&cfg.NoPivotRoot, "no-pivot-root", false, "chroot into containers' roots (for an initramfs root)")
	fs.StringVar(&cfg.FIFODir, "fifo-dir", "", "containers' output FIFOs (default "+plugin.DefaultFIFODir+")")
	fs.StringVar(&cfg.CNIConfDir, "cni-conf-dir", "", "pod network configuration (default /etc/cni/net.d)")
	fs.Func("cni-bin-dirs", "CNI plugin directories, colon-separated (default /usr/lib/cni:/opt/cni/bin)", func(v string) error {
		cfg.CNIBinDirs = strings.Split(v, ":")
		return nil
	})
	_, p, err := connect(fs, args, &cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	// The daemon owns the terminal's signals; the plugin ends with stdin.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	srv := rpc.NewServer()
	if err := srv.RegisterName(pluginapi.Service, p); err != nil {
		return err
	}
	// net/rpc would wait for every call in flight (waits last as long as
	// containers) before returning: the plugin exits as soon as the daemon
	// is gone instead. It holds no state, so nothing is lost.
	srv.ServeCodec(jsonrpc.NewServerCodec(struct {
		io.Reader
		io.Writer
		io.Closer
	}{exitOnEOF{os.Stdin}, os.Stdout, os.Stdin}))
	return nil
}

// exitOnEOF ends the process when the daemon closes the plugin's stdin.
type exitOnEOF struct{ r io.Reader }

func (e exitOnEOF) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && n == 0 {
		os.Exit(0)
	}
	return n, err
}

func execCmd(args []string) (int, error) {
	var cfg plugin.Config
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	interactive := fs.Bool("i", false, "pass stdin to the command")
	tty := fs.Bool("t", false, "allocate a terminal")
	rest, p, err := connect(fs, args, &cfg)
	if err != nil {
		return 1, err
	}
	defer p.Close()
	if len(rest) > 1 && rest[1] == "--" {
		rest = append(rest[:1], rest[2:]...)
	}
	if len(rest) < 2 {
		return 2, errors.New("exec: need a container ID and a command")
	}
	var stdin io.Reader
	if *interactive {
		stdin = os.Stdin
	}
	var size *plugin.TerminalSize
	if *tty {
		size = &plugin.TerminalSize{}
		if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
			if w, h, err := term.GetSize(fd); err == nil {
				size.Width, size.Height = uint32(w), uint32(h)
			}
			if old, err := term.MakeRaw(fd); err == nil {
				defer term.Restore(fd, old)
			}
		}
	}
	return p.ExecInteractive(rest[0], rest[1:], stdin, os.Stdout, os.Stderr, size)
}
