// Command stamp writes the current time in nanoseconds to a file: "stamp
// FILE". Benchmark workloads in images (whose busybox date has no %N)
// timestamp themselves with it.
package main

import (
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		os.Stderr.WriteString("usage: stamp FILE\n")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], []byte(strconv.FormatInt(time.Now().UnixNano(), 10)+"\n"), 0o644); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
