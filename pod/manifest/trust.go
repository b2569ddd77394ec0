package manifest

import (
	"fmt"
	"io/fs"
)

// Whoever can write a manifest can run pods, as root. As sshd's
// StrictModes refuses an authorized_keys file that another user could have
// written, a manifest is refused when anyone but root (or the daemon's own
// user) could have chosen what it says: the file, every directory from /
// down to it, and every link followed on the way, are judged at every
// read. The rules are in untrusted; the steps come from openManifest.

// pathStep is one thing a manifest's path passed through: a directory, a
// link or the file itself, as fstat saw it.
type pathStep struct {
	Path string
	UID  uint32
	Mode fs.FileMode // type and permission bits, as fs.FileInfo's
	// Listed marks the manifest directory itself, whose every new file
	// is read as a manifest.
	Listed bool
}

// untrustedError is why a manifest is refused: one step of its path that
// someone other than root or the daemon's user could change.
type untrustedError struct {
	step pathStep
	why  string
}

func (e *untrustedError) Error() string {
	kind := "file"
	switch {
	case e.step.Listed:
		kind = "the manifest directory"
	case e.step.Mode.IsDir():
		kind = "directory"
	case e.step.Mode&fs.ModeSymlink != 0:
		kind = "link"
	}
	return fmt.Sprintf("%s %s %s: whoever can write there can run pods as root", kind, e.step.Path, e.why)
}

// judgeTrust returns why steps, the path to a manifest, are untrusted, or
// nil.
func judgeTrust(steps []pathStep, euid int) error {
	for _, s := range steps {
		if why := untrusted(s, euid); why != "" {
			return &untrustedError{step: s, why: why}
		}
	}
	return nil
}

// untrusted says why someone other than root and the daemon's user
// (euid) could change what s leads to, or "".
//
// The owner of anything may chmod it, so every owner counts, a link's
// too: in a sticky directory the owner of a link may replace it.
// Write permission for group or others counts on the file and on every
// directory, as in sshd, with one exception sshd does not make: a sticky
// directory on the way (/tmp) lets others add entries but not rename or
// remove those of root or the daemon's user, and the next step is judged
// by its owner, so such a directory cannot change where the path leads.
// podvisor's data directory takes the same rule for its parents. The
// manifest directory itself gets no such exception: every file added
// to it is a new pod.
func untrusted(s pathStep, euid int) string {
	if s.UID != 0 && int64(s.UID) != int64(euid) {
		if euid == 0 {
			return fmt.Sprintf("is owned by uid %d, not root", s.UID)
		}
		return fmt.Sprintf("is owned by uid %d, neither root nor the daemon's uid %d", s.UID, euid)
	}
	if s.Mode&fs.ModeSymlink != 0 || s.Mode.Perm()&0o022 == 0 {
		return "" // a link's own mode means nothing
	}
	sticky := s.Mode&fs.ModeSticky != 0
	if s.Mode.IsDir() && sticky && !s.Listed {
		return ""
	}
	mode := uint32(s.Mode.Perm())
	if sticky {
		mode |= 0o1000
	}
	if s.Listed && sticky {
		return fmt.Sprintf("is writable by group or others (mode %04o; the sticky bit does not stop new files)", mode)
	}
	return fmt.Sprintf("is writable by group or others (mode %04o)", mode)
}
