// Package hostcmd says how a container's command runs as a host process:
// where it is found (the container's PATH, not the daemon's) and whose
// credentials it runs with. The process runtime's shim, its exec and the
// probes' exec handlers all follow it.
package hostcmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultPath is PATH for containers that do not set one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// LookPath resolves a command in the container's PATH, not the daemon's.
func LookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

// Credential is the credential to run as uid and gid, each defaulting to
// this process's; nil when neither is set. Run by root, it also clears
// the supplementary groups, as runc does: a process run as a user must
// not keep root's groups (group 0 reads what root's group may).
func Credential(uid, gid *uint32) *syscall.Credential {
	if uid == nil && gid == nil {
		return nil
	}
	cred := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), NoSetGroups: os.Getuid() != 0}
	if uid != nil {
		cred.Uid = *uid
	}
	if gid != nil {
		cred.Gid = *gid
	}
	return cred
}
