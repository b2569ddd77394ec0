// Command hog allocates memory step by step until told to stop, for the
// eviction tests and benchmark. It logs to -log when memory.available (as
// podvisor computes it) first falls below -threshold ("cross <unixnano>")
// and when SIGTERM arrives ("term <unixnano>").
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/pressure"
)

func main() {
	total := flag.Int("mb", 512, "MiB to allocate in all")
	step := flag.Int("step", 32, "MiB per step")
	every := flag.Duration("every", 10*time.Millisecond, "pause between steps")
	threshold := flag.Int64("threshold", 0, "memory.available threshold in bytes to report crossing")
	logPath := flag.String("log", "", "file for cross/term timestamps")
	flag.Parse()
	logf, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		logf = os.Stdout
	}
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	go func() {
		<-terms
		fmt.Fprintf(logf, "term %d\n", time.Now().UnixNano())
		logf.Sync()
		os.Exit(0)
	}()
	obs := pressure.Observer{MemoryCgroup: cgroups.V1MemoryMount()}
	var held [][]byte
	crossed := false
	for got := 0; got < *total; got += *step {
		b := make([]byte, *step<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touch every page so it is resident
			// Look each MiB until crossed: the crossing time is the start
			// of the eviction latency.
			if !crossed && *threshold > 0 && i%(1<<20) == 0 {
				if o, ok := obs.Observe()[eviction.MemoryAvailable]; ok && o.Available < *threshold {
					crossed = true
					fmt.Fprintf(logf, "cross %d\n", time.Now().UnixNano())
				}
			}
		}
		held = append(held, b)
		time.Sleep(*every)
	}
	fmt.Fprintf(logf, "holding %d MiB\n", len(held)**step)
	select {}
}
