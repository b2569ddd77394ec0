package compat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPreviousCommit(t *testing.T) {
	for _, tc := range []struct{ file, want, err string }{
		{"# comment\n\n  145b175  \n", "145b175", ""},
		{"v1.2.0\nignored\n", "v1.2.0", ""},
		{"# only a comment\n", "", "names no commit"},
		{"145b175 5a77782\n", "", "is not one commit"},
		{"--upload-pack=x\n", "", "is not one commit"},
	} {
		repo := t.TempDir()
		path := filepath.Join(repo, "test", "compat", "previous-release")
		os.MkdirAll(filepath.Dir(path), 0o755)
		os.WriteFile(path, []byte(tc.file), 0o644)
		got, err := PreviousCommit(repo)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %q, %v; want %q, an error with %q", tc.file, got, err, tc.want, tc.err)
		}
	}
}

// The repository's own file names a commit.
func TestRepoNamesPreviousRelease(t *testing.T) {
	if _, err := PreviousCommit(Repo()); err != nil {
		t.Fatal(err)
	}
}
