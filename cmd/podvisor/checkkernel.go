package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/kernel"
)

// maxKernelConfig bounds what check-kernel reads: a full distribution
// config is about 300 KB.
const maxKernelConfig = 16 << 20

// cmdCheckKernel checks a kernel configuration against what podvisor needs:
// the file given, or the running kernel's (/proc/config.gz, then
// /boot/config-RELEASE) together with its command line.
func cmdCheckKernel(args []string, out io.Writer) error {
	fset := flag.NewFlagSet("check-kernel", flag.ContinueOnError)
	file := fset.String("config", "", "kernel .config to check (plain or gzip); default: the running kernel's")
	containerd := fset.Bool("containerd", false, "fail on options containerd pods need, too")
	pos, err := parseInterspersed(fset, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("check-kernel: unexpected argument %q", pos[0])
	}
	var release, cmdline string
	source := *file
	if source == "" {
		var uts unix.Utsname
		if err := unix.Uname(&uts); err == nil {
			release = unix.ByteSliceToString(uts.Release[:])
		}
		source = "/proc/config.gz"
		if _, err := os.Stat(source); errors.Is(err, fs.ErrNotExist) {
			source = "/boot/config-" + release
		}
		if b, err := os.ReadFile("/proc/cmdline"); err == nil {
			cmdline = strings.TrimSpace(string(b))
		}
	}
	cfg, err := readKernelConfig(source)
	if err != nil {
		if *file == "" {
			return fmt.Errorf("%w (the kernel has no /proc/config.gz and no /boot/config-%s: pass --config FILE)", err, release)
		}
		return err
	}
	if cfg.Version == (kernel.Version{}) && release != "" {
		fmt.Sscanf(release, "%d.%d", &cfg.Version.Major, &cfg.Version.Minor)
	}
	failing := kernel.Report(out, source, cfg, kernel.Check(cfg, kernel.Requirements), *containerd)
	if *file == "" {
		for _, w := range kernel.BootParams(cfg, cmdline) {
			fmt.Fprintf(out, "boot     %s\n", w)
		}
	}
	if failing > 0 {
		return fmt.Errorf("check-kernel: %s: %d required option(s) missing", source, failing)
	}
	return nil
}

// readKernelConfig reads a plain or gzip-compressed .config.
func readKernelConfig(path string) (kernel.Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return kernel.Config{}, err
	}
	defer f.Close()
	head := make([]byte, 2)
	n, _ := io.ReadFull(f, head)
	var r io.Reader = io.MultiReader(bytes.NewReader(head[:n]), f)
	if n == 2 && head[0] == 0x1f && head[1] == 0x8b {
		z, err := gzip.NewReader(r)
		if err != nil {
			return kernel.Config{}, fmt.Errorf("%s: %w", path, err)
		}
		defer z.Close()
		r = z
	}
	cfg, err := kernel.Parse(io.LimitReader(r, maxKernelConfig))
	if err != nil {
		return kernel.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
