// Package releases is what the hub keeps of a release apart from the
// fleet database: the artifacts' bytes as they travel, one file per
// transfer hash under <data>/releases/blobs (written whole or not at all),
// and how a pushed file is read: an agent binary's name and architecture
// from its Go build information, its size and hashes, and whether gzip
// saves enough to send it encoded.
package releases

import (
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Decode reads a signed manifest's release without checking its
// signature: the hub checked it when the release was pushed, and
// devices check it again with their release key.
func Decode(signed []byte) (*protocol.Release, error) {
	var env protocol.SignedDoc
	if err := json.Unmarshal(signed, &env); err != nil {
		return nil, fmt.Errorf("release manifest: %w", err)
	}
	var r protocol.Release
	if err := json.Unmarshal(env.Doc, &r); err != nil {
		return nil, fmt.Errorf("release manifest: %w", err)
	}
	return &r, nil
}

// Inspect reads an agent binary's name (the last element of its main
// package's path: podvisor, podvisor-shim or podvisor-containerd) and
// architecture (GOARCH, with GOARM: armv6, armv7) from its Go build
// information; anything else is refused, naming the file.
func Inspect(file string) (name, arch string, err error) {
	bi, err := buildinfo.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("%s: not a Go binary with build information: %w", file, err)
	}
	name = path.Base(bi.Path)
	if !slices.Contains(protocol.AgentArtifacts, name) {
		return "", "", fmt.Errorf("%s: built from %s, not one of podvisor's binaries (%s)", file, bi.Path, strings.Join(protocol.AgentArtifacts, ", "))
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	arch = settings["GOARCH"]
	if arch == "arm" {
		goarm, _, _ := strings.Cut(settings["GOARM"], ",") // "7,softfloat"
		if goarm != "6" && goarm != "7" {
			return "", "", fmt.Errorf("%s: an arm binary with GOARM %q; want 6 or 7", file, settings["GOARM"])
		}
		arch = "armv" + goarm
	}
	if !slices.Contains(protocol.KnownArchitectures, arch) {
		return "", "", fmt.Errorf("%s: architecture %q; a device is one of %s", file, arch, strings.Join(protocol.KnownArchitectures, ", "))
	}
	return name, arch, nil
}

// Describe is a file's artifact: its size and hash, and its gzip
// encoding's when that saves at least a tenth of the bytes.
func Describe(file, name, arch string) (protocol.Artifact, error) {
	a := protocol.Artifact{Name: name, Arch: arch}
	f, err := os.Open(file)
	if err != nil {
		return a, err
	}
	defer f.Close()
	raw, gz := sha256.New(), sha256.New()
	var wire counter
	zw, _ := gzip.NewWriterLevel(io.MultiWriter(gz, &wire), gzip.BestSpeed)
	n, err := io.Copy(io.MultiWriter(raw, zw), f)
	if err != nil {
		return a, fmt.Errorf("%s: %w", file, err)
	}
	if err := zw.Close(); err != nil {
		return a, err
	}
	if n == 0 || n > protocol.MaxArtifactBytes {
		return a, fmt.Errorf("%s: %d bytes; want 1 to %d", file, n, int64(protocol.MaxArtifactBytes))
	}
	a.Size, a.SHA256 = n, hex.EncodeToString(raw.Sum(nil))
	if wire.n*10 <= n*9 {
		a.Encoding, a.WireSize, a.WireSHA256 = "gzip", wire.n, hex.EncodeToString(gz.Sum(nil))
	}
	return a, nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// Wire streams the bytes of a's file as they travel: the file itself, or
// its gzip encoding, made again exactly as Describe made it (the same
// compressor and level are deterministic).
func Wire(file string, a protocol.Artifact) (io.ReadCloser, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	if a.Encoding == "" {
		return f, nil
	}
	pr, pw := io.Pipe()
	go func() {
		defer f.Close()
		zw, _ := gzip.NewWriterLevel(pw, gzip.BestSpeed)
		_, err := io.Copy(zw, f)
		if err == nil {
			err = zw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// Store is the artifacts' bytes as they travel, by transfer hash.
type Store struct {
	Dir string // <data>/releases
	// Free is the bytes free on dir's file system (nil: statfs).
	Free func(dir string) (int64, error)
}

// FreeMargin is kept free beside a push's blobs: fleet.db and the hub's
// other files live on the same disk.
const FreeMargin = 64 << 20

// Room refuses a push whose blobs, need bytes not stored yet, would
// leave less than FreeMargin free, before any of them is written.
func (s Store) Room(need int64) error {
	dir := filepath.Join(s.Dir, "blobs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	free := s.Free
	if free == nil {
		free = freeBytes
	}
	have, err := free(dir)
	if err != nil {
		return fmt.Errorf("the free space in %s: %w", dir, err)
	}
	if have-need < FreeMargin {
		return fmt.Errorf("the artifacts need %d bytes in %s, %d are free (%d are kept free for the fleet database)", need, dir, have, int64(FreeMargin))
	}
	return nil
}

func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// Path is the file of the bytes whose hash is sha.
func (s Store) Path(sha string) string { return filepath.Join(s.Dir, "blobs", sha) }

// Has says whether the bytes of sha, size long, are stored.
func (s Store) Has(sha string, size int64) bool {
	fi, err := os.Stat(s.Path(sha))
	return err == nil && fi.Mode().IsRegular() && fi.Size() == size
}

// Put stores size bytes from r under sha: written to a temporary file,
// checked (no more, no fewer bytes; the hash), synced, then renamed in
// place and the directory synced, so a blob is whole or absent.
func (s Store) Put(sha string, size int64, r io.Reader) error {
	dir := filepath.Join(s.Dir, "blobs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, size+1))
	if err != nil {
		return fmt.Errorf("artifact %s: %w", sha, err)
	}
	if n != size {
		return fmt.Errorf("artifact %s: %d bytes sent, the manifest says %d", sha, n, size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		return fmt.Errorf("artifact %s: the bytes sent hash to %s", sha, got)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), s.Path(sha)); err != nil {
		return err
	}
	return syncDir(dir)
}

// CheckDecoded checks an artifact against its stored blob: the transfer
// size, and that an encoded artifact's bytes decode to what its manifest
// says it installs (size and SHA-256). The blob is
// named by its transfer hash only, and Put checks only that: a manifest
// whose decoded size or hash is wrong (a careless build script, or a
// second manifest naming the same blob with other claims) would
// otherwise be stored and rolled out, and refused by every device after
// its download. Decoding stops one byte past the declared size.
func (s Store) CheckDecoded(a protocol.Artifact) error {
	sha, size := a.Transfer()
	if !s.Has(sha, size) {
		// Two artifacts of a manifest naming one blob with two sizes.
		return fmt.Errorf("artifact %s (%s): no stored blob %s of %d bytes", a.Name, a.Arch, sha, size)
	}
	if a.Encoding == "" {
		return nil // the transfer hash is the installed bytes' hash
	}
	f, err := os.Open(s.Path(sha))
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("artifact %s (%s): gzip: %w", a.Name, a.Arch, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(zr, a.Size+1))
	if err != nil {
		return fmt.Errorf("artifact %s (%s): gzip: %w", a.Name, a.Arch, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != a.Size || got != a.SHA256 {
		return fmt.Errorf("artifact %s (%s): the encoded bytes decode to %d bytes with sha256 %s, the manifest says %d bytes with sha256 %s",
			a.Name, a.Arch, n, got, a.Size, a.SHA256)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Prune removes the blobs no manifest of keep names.
func (s Store) Prune(keep [][]byte) error {
	named := map[string]bool{}
	for _, m := range keep {
		r, err := Decode(m)
		if err != nil {
			return err
		}
		for _, a := range r.Artifacts {
			sha, _ := a.Transfer()
			named[sha] = true
		}
	}
	entries, err := os.ReadDir(filepath.Join(s.Dir, "blobs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		// Uploads under way (".upload-*") are their push's to finish.
		if !named[e.Name()] && !strings.HasPrefix(e.Name(), ".") {
			if err := os.Remove(filepath.Join(s.Dir, "blobs", e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
