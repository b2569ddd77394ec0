package podfs

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/safepath"
)

// maxLinks bounds the links followed in one subPath, as the kernel's
// ELOOP limit does.
const maxLinks = 40

// errLinkEscapes is a link that would leave the volume.
var errLinkEscapes = errors.New("a link leads out of the volume")

// openThroughOwnLinks opens rel beneath root, a volume the daemon wrote
// with the atomic writer (containers mount it read-only), following its
// relative links ("key -> ..data/key", "..data -> ..<timestamp>") but
// never out of root: the links are resolved by name, component by
// component, and what they resolve to is opened without links. The
// caller holds FS.mu, so the writer does not swap the data meanwhile.
func openThroughOwnLinks(root *os.File, rel string) (*os.File, error) {
	resolved, err := resolveBeneath(root, rel)
	if err != nil {
		return nil, &safepath.Error{Path: rel, Component: rel, Err: err}
	}
	return safepath.Open(root, resolved)
}

// resolveBeneath turns rel into a path beneath root without links,
// following relative links lexically; an absolute link or one that climbs
// above root is refused.
func resolveBeneath(root *os.File, rel string) (string, error) {
	todo := strings.Split(rel, "/")
	var done []string
	links := 0
	buf := make([]byte, unix.PathMax)
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", errLinkEscapes
			}
			done = done[:len(done)-1]
			continue
		}
		cur := strings.Join(append(done, name), "/")
		n, err := unix.Readlinkat(int(root.Fd()), cur, buf)
		switch {
		case err == unix.EINVAL: // not a link
			done = append(done, name)
			continue
		case err == unix.ENOENT:
			// Left for the open to report, as it would.
			return strings.Join(append(append(done, name), todo...), "/"), nil
		case err != nil:
			return "", err
		}
		if links++; links > maxLinks {
			return "", unix.ELOOP
		}
		target := string(buf[:n])
		if strings.HasPrefix(target, "/") {
			return "", errLinkEscapes
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return strings.Join(done, "/"), nil
}
