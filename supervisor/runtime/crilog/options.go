package crilog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"time"
)

// Options are the kubelet's log options a reader honours (kubectl logs
// --timestamps, --since, --since-time, --tail).
type Options struct {
	// Timestamps starts each line with its record's time, RFC 3339 with
	// nanoseconds, and a space, as the kubelet writes them.
	Timestamps bool
	// Since drops records written before it (zero: none dropped).
	Since time.Time
	// TailLines starts at that many lines before the end, counted across
	// the rotated files; negative: from the start.
	TailLines int64
}

// CopyOptions is Copy with options.
func CopyOptions(out io.Writer, path string, opts Options) error {
	files := Files(path)
	return copyFrom(out, files, tailPosition(files, opts.TailLines), newFilter(opts))
}

// FollowOptions is Follow with options.
func FollowOptions(ctx context.Context, out io.Writer, path string, done <-chan struct{}, opts Options) error {
	return follow(ctx, out, path, done, tailPosition(Files(path), opts.TailLines), newFilter(opts))
}

// position is where in a log's files reading starts.
type position struct {
	file   int
	offset int64
}

// tailPosition finds the start of the last n lines of files (oldest first):
// counting each file's lines from the newest back, then the offset of the
// first line wanted in the file where they start. Two passes over that
// file keep memory flat, however many lines are asked for.
func tailPosition(files []string, n int64) position {
	if n < 0 {
		return position{}
	}
	need := n
	for i := len(files) - 1; i >= 0; i-- {
		lines, size := countLines(files[i])
		if lines >= need {
			if need == 0 {
				return position{i, size}
			}
			return position{i, lineOffset(files[i], lines-need)}
		}
		need -= lines
	}
	return position{}
}

// countLines counts the complete logical lines of a log file (records
// ending a line) and the bytes of its complete records.
func countLines(path string) (lines, size int64) {
	fh, err := openLog(path)
	if err != nil {
		return 0, 0
	}
	defer fh.Close()
	br := bufio.NewReaderSize(fh, MaxLine+128)
	for {
		rec, err := br.ReadBytes('\n')
		if err != nil {
			return lines, size
		}
		size += int64(len(rec))
		if _, full := parseRecord(rec); full {
			lines++
		}
	}
}

// lineOffset is the offset of the logical line numbered skip (from 0).
func lineOffset(path string, skip int64) int64 {
	fh, err := openLog(path)
	if err != nil {
		return 0
	}
	defer fh.Close()
	br := bufio.NewReaderSize(fh, MaxLine+128)
	var off int64
	for skip > 0 {
		rec, err := br.ReadBytes('\n')
		if err != nil {
			return off
		}
		off += int64(len(rec))
		if _, full := parseRecord(rec); full {
			skip--
		}
	}
	return off
}

// filter drops records before a time and stamps lines.
type filter struct {
	opts    Options
	midLine bool // the last record written continues on the next (P)
}

func newFilter(o Options) *filter {
	if !o.Timestamps && o.Since.IsZero() {
		return nil
	}
	return &filter{opts: o}
}

var errNoTime = errors.New("record without a time")

// record writes one CRI record's text as the options say.
func (f *filter) record(out io.Writer, line []byte) error {
	at, err := recordTime(line)
	if !f.opts.Since.IsZero() && (err != nil || at.Before(f.opts.Since)) {
		return nil
	}
	text, full := parseRecord(line)
	if f.opts.Timestamps && !f.midLine {
		stamp := at.Format(time.RFC3339Nano)
		if err != nil {
			stamp = "-"
		}
		if _, err := io.WriteString(out, stamp+" "); err != nil {
			return err
		}
	}
	f.midLine = !full
	if full {
		text = append(text, '\n')
	}
	_, err = out.Write(text)
	return err
}

// recordTime is the time a CRI record was written.
func recordTime(line []byte) (time.Time, error) {
	ts, _, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return time.Time{}, errNoTime
	}
	return time.Parse(time.RFC3339Nano, string(ts))
}
