package gateway

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/sync/pki"
)

// The token file (<data-dir>/tokens, 0600) holds one line per token:
// its name, the SHA-256 of the token in hex, and when it was made. The
// token itself is printed once, by podhub token create, and kept nowhere.
const (
	tokenPrefix   = "podhub_"
	maxTokenFile  = 1 << 20
	maxTokenBytes = 256 // longer bearer values are refused unread
	tokenHeader   = "# podhub's bearer tokens: name, SHA-256 of the token (hex), created. Edit with podhub token.\n"
)

// Token is one entry of the token file.
type Token struct {
	Name    string
	Created time.Time
	hash    [sha256.Size]byte
}

// ErrNoToken is returned when deleting a token that does not exist.
var ErrNoToken = errors.New("no such token")

// CreateToken makes a new token named name, stores its hash in the file
// at path and returns the token (shown once to the operator).
func CreateToken(path, name string, now time.Time) (string, error) {
	if err := pki.ValidUserName(name); err != nil {
		return "", fmt.Errorf("token name: %w", err)
	}
	var secret string
	err := editTokens(path, func(list []Token) ([]Token, error) {
		for _, t := range list {
			if t.Name == name {
				return nil, fmt.Errorf("token %q exists; delete it first (podhub token delete %s)", name, name)
			}
		}
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		secret = tokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
		return append(list, Token{Name: name, Created: now.UTC().Truncate(time.Second), hash: sha256.Sum256([]byte(secret))}), nil
	})
	return secret, err
}

// DeleteToken removes the token named name; a running gateway refuses it
// from its next request on.
func DeleteToken(path, name string) error {
	return editTokens(path, func(list []Token) ([]Token, error) {
		for i, t := range list {
			if t.Name == name {
				return append(list[:i], list[i+1:]...), nil
			}
		}
		return nil, fmt.Errorf("token %q: %w", name, ErrNoToken)
	})
}

// ListTokens reads the token file (missing: no tokens).
func ListTokens(path string) ([]Token, error) {
	list, _, err := readTokens(path)
	return list, err
}

// editTokens changes the token file under its lock, writing the result
// through a temporary file and a rename (0600).
func editTokens(path string, edit func([]Token) ([]Token, error)) error {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("token file lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("token file lock %s: %w", path+".lock", err)
	}
	list, _, err := readTokens(path)
	if err != nil {
		return err
	}
	if list, err = edit(list); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(tokenHeader)
	for _, t := range list {
		fmt.Fprintf(&b, "%s %s %s\n", t.Name, hex.EncodeToString(t.hash[:]), t.Created.Format(time.RFC3339))
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// fileStamp tells one version of a file from another without reading it.
type fileStamp struct {
	ino, size int64
	mtime     int64
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = int64(sys.Ino)
	}
	return st
}

// readTokens parses the token file strictly: a line it cannot read is an
// error naming the line, never a token silently dropped or admitted.
func readTokens(path string) ([]Token, fileStamp, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fileStamp{}, nil
	}
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("token file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fileStamp{}, fmt.Errorf("token file %s: mode %#o lets others read it; chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	if fi.Size() > maxTokenFile {
		return nil, fileStamp{}, fmt.Errorf("token file %s: larger than %d bytes", path, maxTokenFile)
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil && fi.Size() > 0 {
		return nil, fileStamp{}, fmt.Errorf("token file %s: %w", path, err)
	}
	var list []Token
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fileStamp{}, fmt.Errorf("token file %s line %d: want NAME SHA256 CREATED", path, n)
		}
		t := Token{Name: fields[0]}
		if err := pki.ValidUserName(t.Name); err != nil {
			return nil, fileStamp{}, fmt.Errorf("token file %s line %d: %w", path, n, err)
		}
		h, err := hex.DecodeString(fields[1])
		if err != nil || len(h) != sha256.Size {
			return nil, fileStamp{}, fmt.Errorf("token file %s line %d: the hash is not %d hex bytes", path, n, sha256.Size)
		}
		copy(t.hash[:], h)
		if t.Created, err = time.Parse(time.RFC3339, fields[2]); err != nil {
			return nil, fileStamp{}, fmt.Errorf("token file %s line %d: created: %w", path, n, err)
		}
		list = append(list, t)
	}
	return list, stampOf(fi), nil
}

// tokens is the gateway's view of the token file: read again whenever
// the file changes, so a token made or deleted counts at the next request
// without a restart.
type tokens struct {
	path string

	mu    sync.Mutex
	stamp fileStamp
	list  []Token
	err   error
}

// current is the token list of the file as it is now. A file that cannot
// be read admits no token (and says why).
func (ts *tokens) current() ([]Token, error) {
	var now fileStamp
	fi, err := os.Stat(ts.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("token file: %w", err)
	default:
		now = stampOf(fi)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if now != ts.stamp || ts.list == nil && ts.err == nil {
		ts.list, _, ts.err = readTokens(ts.path)
		ts.stamp = now
		if ts.list == nil {
			ts.list = []Token{}
		}
	}
	return ts.list, ts.err
}

// lookup finds the token whose hash is sum, comparing every entry in
// constant time.
func (ts *tokens) lookup(sum [sha256.Size]byte) (string, bool, error) {
	list, err := ts.current()
	if err != nil {
		return "", false, err
	}
	name := ""
	for _, t := range list {
		if subtle.ConstantTimeCompare(t.hash[:], sum[:]) == 1 {
			name = t.Name
		}
	}
	return name, name != "", nil
}
