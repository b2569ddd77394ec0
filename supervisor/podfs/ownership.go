package podfs

import (
	"io/fs"
	"os"
	"path/filepath"
)

// The kubelet's SetVolumeOwnership (pkg/volume/volume_linux.go) for the
// volumes it marks read-only (configMap, secret, downwardAPI, projected):
// with an fsGroup, everything in the volume gets that group, files at
// least r--r----- (mode | 0440), directories also g+x u+x and setgid;
// links only change their group.
const (
	roMask   = os.FileMode(0o440)
	execMask = os.FileMode(0o110)
)

// setVolumeOwnership gives what is under dir the pod's fsGroup, as the
// kubelet does for a read-only volume; nothing when fsGroup is nil.
func setVolumeOwnership(dir string, fsGroup *int64) error {
	if fsGroup == nil {
		return nil
	}
	gid := int(*fsGroup)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, -1, gid); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mask := roMask
		if d.IsDir() {
			mask |= os.ModeSetgid | execMask
		}
		// Go's Chmod takes the setgid bit as os.ModeSetgid.
		return os.Chmod(p, info.Mode()|mask)
	})
}
