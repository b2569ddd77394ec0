// SPDX-License-Identifier: MIT
// podvisor: a wait for a listener, instead of the tests' 1 ms sleeps (PATCHES.md).

package listeners

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitListening waits until addr (":port" on localhost) accepts a TCP
// connection: the HTTP listeners only listen once Serve, started in a
// goroutine, has run.
func waitListening(t *testing.T, addr string) {
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", "localhost"+addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, 10*time.Second, time.Millisecond, "a listener on localhost%s", addr)
}
