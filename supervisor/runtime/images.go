package runtime

import (
	"errors"
	"time"
)

// Images is a runtime that keeps container images: the daemon lists,
// imports (side-loads), removes and collects them through it, and retries
// the containers that waited for one when images arrive.
type Images interface {
	Images() ([]Image, error)
	// Import loads an image archive on the device and names its images.
	Import(path string) ([]string, error)
	RemoveImage(name string) error
	// PruneImages removes unused images in the background, one pass at
	// a time.
	PruneImages(PruneArgs)
	// ImageGC is the image garbage collection's configuration.
	ImageGC() ImageGC
	// ImageFS is a path on the file system that holds the images ("":
	// unknown), for the image file system's pressure signal.
	ImageFS() string
	// ImageWaitReasons are the waiting reasons (ErrImagePull, …) of the
	// containers an image that arrived may let start.
	ImageWaitReasons() []string
}

// ErrUnreachable is matched (errors.Is) by the errors of a runtime whose
// own daemon is away: what failed is tried again once it reconnects.
var ErrUnreachable = errors.New("the runtime is unreachable")

// Image is an image a runtime keeps, as podvisor images lists it.
type Image struct {
	Name      string    `json:"name"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"createdAt"`
	// InUse: a container (of any state) uses it.
	InUse bool `json:"inUse"`
	// Origin is where its content came from: "pull" (a registry),
	// "import" (side-loaded) or "" (unknown: stored by something else).
	// Hub pods use only pulled images and the shared ones.
	Origin string `json:"origin,omitempty"`
}

// PruneArgs say which unused images to remove.
type PruneArgs struct {
	// Bytes is how much to free (All: every unused image).
	Bytes int64
	All   bool
	// MinAge spares images used or imported more recently (the kubelet's
	// imageMinimumGCAge): one just pulled is about to be used.
	MinAge time.Duration
}

// ImageGC are the kubelet's image garbage collection thresholds, in
// percent of the image file system used (defaults 85 and 80).
type ImageGC struct {
	HighThresholdPercent int
	LowThresholdPercent  int
	// MinimumAge spares images used or imported more recently.
	MinimumAge time.Duration
}
