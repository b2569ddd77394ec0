// Command mkimage writes a small OCI image archive built from the host's
// static busybox: "mkimage NAME FILE". The demo and benchmarks side-load it.
package main

import (
	"fmt"
	"os"

	"github.com/podvisor/podvisor/test/ociimage"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: mkimage NAME FILE (e.g. podvisor.local/busybox:1 busybox.tar)")
		os.Exit(2)
	}
	if err := ociimage.WriteFile(os.Args[2], ociimage.Image{Name: os.Args[1], Cmd: []string{"sh"}}); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}
