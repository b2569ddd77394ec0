package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// cmdImages lists, imports and removes the images of containerd pods.
func cmdImages(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	socket := fs.String("socket", defaultSocket, "daemon socket")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	verb := "ls"
	if len(pos) > 0 {
		verb, pos = pos[0], pos[1:]
	}
	c := newClient(*socket)
	switch {
	case (verb == "ls" || verb == "list") && len(pos) == 0:
		list, err := c.Images(ctx)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
		fmt.Fprintln(w, "IMAGE\tDIGEST\tSIZE\tIN USE\tCREATED\tORIGIN")
		for _, img := range list.Images {
			digest := img.Digest
			if len(digest) > 19 {
				digest = digest[:19]
			}
			inUse := "no"
			if img.InUse {
				inUse = "yes"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", img.Name, digest, sizeOf(img.Size), inUse,
				duration.HumanDuration(time.Since(img.CreatedAt)), originOf(img.Origin))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		for _, f := range list.Failed {
			fmt.Fprintf(out, "not imported: %s: %s\n", f.File, f.Error)
		}
		return nil
	case verb == "import" && len(pos) == 1:
		path, err := filepath.Abs(pos[0])
		if err != nil {
			return err
		}
		names, err := c.ImportImage(ctx, path)
		if err != nil {
			return err
		}
		for _, n := range names {
			fmt.Fprintf(out, "imported %s\n", n)
		}
		return nil
	case verb == "rm" && len(pos) >= 1:
		for _, name := range pos {
			if err := c.RemoveImage(ctx, name); err != nil {
				return err
			}
			fmt.Fprintf(out, "removed %s\n", name)
		}
		return nil
	}
	return errors.New("usage: podvisor images [ls] | import FILE | rm NAME [NAME]")
}

func sizeOf(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1fKiB", float64(b)/(1<<10))
}

// cmdExec runs a command in a running container, as the container's
// runtime does it (its registered Exec): containerd's through its plugin,
// with a terminal for -t; the process runtime's on the host in the
// container's cgroup, environment and user.
func cmdExec(ctx context.Context, args []string) (int, error) {
	var command []string
	for i, a := range args {
		if a == "--" {
			args, command = args[:i], args[i+1:]
			break
		}
	}
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	cf := addClientFlags(fs)
	container := fs.String("c", "", "container (default: the pod's first)")
	stdin := fs.Bool("i", false, "pass stdin to the command")
	tty := fs.Bool("t", false, "allocate a terminal (containerd pods)")
	fs.BoolVar(stdin, "stdin", false, "same as -i")
	fs.BoolVar(tty, "tty", false, "same as -t")
	pos, err := parseInterspersed(fs, expandIT(args))
	if err != nil {
		return 1, err
	}
	if len(pos) != 1 || len(command) == 0 {
		return 1, errors.New("usage: podvisor exec NAME [-c CONTAINER] [-i] [-t] -- COMMAND [ARG...]")
	}
	c := newClient(*cf.socket)
	pod, err := findPod(ctx, c, *cf.namespace, pos[0])
	if err != nil {
		return 1, err
	}
	t, err := c.ExecTarget(ctx, pod.Namespace, pod.Name, *container)
	if err != nil {
		return 1, err
	}
	target := runtime.ExecTarget(t)
	plugin, ok := runtime.PluginNamed(target.Runtime)
	if !ok || plugin.Exec == nil {
		return 1, fmt.Errorf("exec: the daemon names runtime %q, which this podvisor does not know", target.Runtime)
	}
	return plugin.Exec(target, command, *stdin, *tty)
}

// expandIT lets "-it" mean "-i -t", as kubectl users type it.
func expandIT(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if a == "-it" || a == "-ti" {
			out = append(out, "-i", "-t")
			continue
		}
		out = append(out, a)
	}
	return out
}

// originOf names where an image came from, as podvisor images shows it:
// hub pods use pulled images, and side-loaded ones only when shared.
func originOf(label string) string {
	switch label {
	case "pull":
		return "pulled"
	case "import":
		return "side-loaded"
	}
	return "unknown"
}
