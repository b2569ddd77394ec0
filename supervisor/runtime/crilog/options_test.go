package crilog

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCopyOptions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	rec := func(sec int, tag, text string) string {
		return time.Date(2026, 11, 29, 6, 0, sec, 0, time.UTC).Format(time.RFC3339Nano) + " stdout " + tag + " " + text + "\n"
	}
	os.WriteFile(path+".1", []byte(rec(1, "F", "one")+rec(2, "F", "two")), 0o644)
	os.WriteFile(path, []byte(rec(3, "P", "thr")+rec(3, "F", "ee")+rec(4, "F", "four")+"2026-11-29T06:00:05Z stdout F unfinis"), 0o644)
	for name, tc := range map[string]struct {
		opts Options
		want string
	}{
		"all":             {Options{TailLines: -1}, "one\ntwo\nthree\nfour\n"},
		"tail 0":          {Options{TailLines: 0}, ""},
		"tail 1":          {Options{TailLines: 1}, "four\n"},
		"tail 2 (split)":  {Options{TailLines: 2}, "three\nfour\n"},
		"tail 3 (rotate)": {Options{TailLines: 3}, "two\nthree\nfour\n"},
		"tail 10":         {Options{TailLines: 10}, "one\ntwo\nthree\nfour\n"},
		"since":           {Options{TailLines: -1, Since: time.Date(2026, 11, 29, 6, 0, 3, 0, time.UTC)}, "three\nfour\n"},
		"timestamps": {Options{TailLines: 2, Timestamps: true},
			"2026-11-29T06:00:03Z three\n2026-11-29T06:00:04Z four\n"},
	} {
		var out bytes.Buffer
		if err := CopyOptions(&out, path, tc.opts); err != nil || out.String() != tc.want {
			t.Errorf("%s: %q, %v; want %q", name, out.String(), err, tc.want)
		}
	}
	// Following from the tail writes the rest, and then the end.
	done := make(chan struct{})
	close(done)
	var out bytes.Buffer
	if err := FollowOptions(context.Background(), &out, path, done, Options{TailLines: 1}); err != nil || out.String() != "four\n" {
		t.Errorf("follow tail 1: %q, %v", out.String(), err)
	}
	out.Reset()
	if err := FollowOptions(context.Background(), &out, path, done, Options{TailLines: 3}); err != nil || out.String() != "two\nthree\nfour\n" {
		t.Errorf("follow tail 3: %q, %v", out.String(), err)
	}
}
