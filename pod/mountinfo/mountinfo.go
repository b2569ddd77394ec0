// Package mountinfo reads /proc/<pid>/mountinfo: the one parser the
// cgroup drivers, the listen watcher and the test tools share.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	ID Parent Dev Root Point Options [tags…] - FSType Source SuperOptions
//
// Paths are unescaped (mountinfo writes a space as \040).
type Mount struct {
	ID, Parent   string
	Root, Point  string
	Options      string // the mount's own options
	FSType       string
	Source       string
	SuperOptions string // the file system's options: a cgroup v1 mount's controllers are here
}

// Read reads /proc/self/mountinfo.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads mountinfo lines; malformed lines are skipped.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20) // a line carries options; bound it all the same
	for sc.Scan() {
		if m, ok := ParseLine(sc.Text()); ok {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// ParseLine reads one line; ok is false for a malformed one.
func ParseLine(line string) (m Mount, ok bool) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ { // the optional tags end at "-"
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+2 >= len(f) {
		return Mount{}, false
	}
	m = Mount{ID: f[0], Parent: f[1], Root: Unescape(f[3]), Point: Unescape(f[4]), Options: f[5],
		FSType: f[sep+1], Source: Unescape(f[sep+2])}
	if sep+3 < len(f) {
		m.SuperOptions = f[sep+3]
	}
	return m, true
}

// Unescape undoes mountinfo's octal escapes (\040 for a space, \134 for a
// backslash); a backslash not followed by three octal digits stays.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
