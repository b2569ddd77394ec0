package containerd

import (
	"context"
	"io"

	"github.com/podvisor/podvisor/supervisor/runtime/crilog"
)

// CopyLog writes the text of an instance's log to out (runtime.LogReader):
// the plugin writes it as the process shim does.
func (r *Runtime) CopyLog(out io.Writer, path string) error { return crilog.Copy(out, path) }

// FollowLog follows an instance's log (runtime.LogReader).
func (r *Runtime) FollowLog(ctx context.Context, out io.Writer, path string, ended <-chan struct{}) error {
	return crilog.Follow(ctx, out, path, ended)
}
