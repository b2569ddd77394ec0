//go:build podvisor_testbroken

package main

// A deliberately broken podvisor, for the self-update's end-to-end test
// (test/e2e/selfupdate_test.go): built with
//
//	go build -tags podvisor_testbroken ./cmd/podvisor
//
// its `podvisor run` exits with an error at start, before anything is
// opened — as a release built wrong or missing something on the device
// would — so that the launcher's boot counting must roll it back. Like a
// daemon that fails, it records why in its slot (the rollback's reason).
// Shipped binaries are never built with this tag (packaging/buildflags.sh
// adds only the tags it is given), so they carry no such hook: without the
// tag this file is not compiled at all.

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/firmware/agent"
)

func init() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		return
	}
	err := errors.New("this podvisor was built with the podvisor_testbroken tag: run fails at start on purpose")
	agent.RecordError(dataDirArg(os.Args[2:]), err)
	fmt.Fprintf(os.Stderr, "error: %s\n", err)
	os.Exit(1)
}

// dataDirArg is run's --data-dir (the test always gives it), else the
// default; a data directory set only in the config file is not looked at.
func dataDirArg(args []string) string {
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, "-data-dir="); ok {
			return v
		}
		if a == "-data-dir" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return config.DefaultDataDir
}
