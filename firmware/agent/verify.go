package agent

import (
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Arch is this device's architecture as releases name it: GOARCH, with
// arm split by GOARM (armv6, armv7).
func Arch() string {
	goarm := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "GOARM" {
				goarm = s.Value
			}
		}
	}
	return archName(runtime.GOARCH, goarm)
}

func archName(goarch, goarm string) string {
	if goarch != "arm" {
		return goarch
	}
	goarm, _, _ = strings.Cut(goarm, ",") // "7,softfloat"
	if goarm == "" {
		goarm = "7" // the toolchain's default
	}
	return "armv" + goarm
}

// checkRelease opens an order's release with the release key and decides
// whether this device installs it: its kind, this arch's binaries, the
// version against the running one. same reports that the version already
// runs (nothing to install).
func checkRelease(o *protocol.Order, key ed25519.PublicKey, arch, running string) (r *protocol.Release, same bool, err error) {
	r, err = protocol.OpenRelease(o.Release, key)
	if err != nil {
		return nil, false, err
	}
	if r.Kind == protocol.ReleaseFirmware {
		return r, false, nil
	}
	if len(r.For(arch)) == 0 {
		return r, false, fmt.Errorf("release %s has no binaries for %s (it has %s)", r.Version, arch, strings.Join(r.Architectures(), ", "))
	}
	if r.Version == running {
		return r, true, nil
	}
	cmp, err := protocol.CompareVersions(r.Version, running)
	switch {
	case err != nil && !o.AllowDowngrade:
		return r, false, fmt.Errorf("the running version %q is not a semantic version, so %s may be a downgrade; refused without allowDowngrade", running, r.Version)
	case err != nil:
	case cmp == 0:
		return r, true, nil
	case cmp < 0 && !o.AllowDowngrade:
		return r, false, fmt.Errorf("release %s is older than the running %s: a downgrade, refused without allowDowngrade", r.Version, running)
	}
	return r, false, nil
}

// checkWire verifies a downloaded file's transfer size and SHA-256 before
// anything decodes it.
func checkWire(path string, a protocol.Artifact) error {
	sha, size := a.Transfer()
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Size() != size {
		return fmt.Errorf("%s: downloaded %d bytes, the release says %d (truncated)", a.Name, st.Size(), size)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return err
	}
	if sum != sha {
		return fmt.Errorf("%s: downloaded bytes have SHA-256 %s, the release says %s", a.Name, sum, sha)
	}
	return nil
}

// decodeTo writes an artifact's installed bytes from its verified wire
// file to dest (created 0755, fsynced), decoding gzip with a hard cap at
// the declared size, and verifies their size and SHA-256.
func decodeTo(wire, dest string, a protocol.Artifact) error {
	in, err := os.Open(wire)
	if err != nil {
		return err
	}
	defer in.Close()
	var src io.Reader = in
	if a.Encoding == "gzip" {
		zr, err := gzip.NewReader(in)
		if err != nil {
			return fmt.Errorf("%s: gzip: %w", a.Name, err)
		}
		defer zr.Close()
		src = zr
	}
	return writeVerified(dest, io.LimitReader(src, a.Size+1), a.Name, a.Size, a.SHA256)
}

// writeVerified copies src to a new file dest, fsyncs it and checks that
// it is size bytes with SHA-256 sha; a bad or failed copy is removed.
func writeVerified(dest string, src io.Reader, name string, size int64, sha string) (err error) {
	out, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			out.Close()
			os.Remove(dest)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), &crashReader{r: src, half: size / 2})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if n != size {
		return fmt.Errorf("%s: %d bytes, the release says %d", name, n, size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != sha {
		return fmt.Errorf("%s: SHA-256 %s, the release says %s", name, sum, sha)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return out.Close()
}

// crashReader calls crashPoint("write") once half the bytes are read.
type crashReader struct {
	r    io.Reader
	n    int64
	half int64
	hit  bool
}

func (c *crashReader) Read(p []byte) (int, error) {
	if !c.hit && c.n >= c.half && c.n > 0 {
		c.hit = true
		crashPoint("write")
	}
	if c.half > 0 && int64(len(p)) > c.half {
		p = p[:c.half] // small reads, so the middle is reached
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// diskFull words an ENOSPC for the report.
func diskFull(err error, dir string) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("disk full in %s: %w", dir, err)
	}
	return err
}

// freeBytes is what an unprivileged writer may still use on dir's file
// system.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
