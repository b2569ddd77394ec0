package runtime

import (
	"context"
	"io"
)

// LogReader is a runtime that reads back the logs its instances wrote.
type LogReader interface {
	// CopyLog writes the text of a log (all its rotated files) to out.
	CopyLog(out io.Writer, path string) error
	// FollowLog writes a log's text to out, then what is appended to it,
	// until ctx ends or ended closes (the rest is written first).
	FollowLog(ctx context.Context, out io.Writer, path string, ended <-chan struct{}) error
}
