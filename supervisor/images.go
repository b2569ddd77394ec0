package supervisor

import (
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/images"
)

// imageManager returns the image component once the daemon runs: API
// requests can arrive while it is still starting.
func (d *Daemon) imageManager() (*images.Images, error) {
	var im *images.Images
	err := d.do(func() error { im = d.images; return nil })
	return im, err
}

// Images implements api.Backend.
func (d *Daemon) Images() (api.ImageList, error) {
	im, err := d.imageManager()
	if err != nil {
		return api.ImageList{}, err
	}
	imgs, failed, err := im.List()
	if err != nil {
		return api.ImageList{}, err
	}
	var out []api.ImportFailure
	for _, f := range failed {
		out = append(out, api.ImportFailure(f))
	}
	return api.ImageList{Images: imgs, Failed: out}, nil
}

// ImportImage implements api.Backend: it imports an archive on the device
// and lets pods waiting for an image try again at once.
func (d *Daemon) ImportImage(path string) ([]string, error) {
	im, err := d.imageManager()
	if err != nil {
		return nil, err
	}
	return im.Import(path)
}

// RemoveImage implements api.Backend.
func (d *Daemon) RemoveImage(name string) error {
	im, err := d.imageManager()
	if err != nil {
		return err
	}
	return im.Remove(name)
}
