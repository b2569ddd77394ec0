// Package ociimage builds small OCI image archives for tests and
// benchmarks from the host's static busybox, so no registry is needed.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"
)

// Applets are the busybox commands the image links in /bin.
var Applets = []string{"sh", "sleep", "echo", "cat", "ls", "hostname", "id", "env", "nc", "wget",
	"httpd", "mkdir", "touch", "rm", "ln", "kill", "ps", "grep", "true", "false", "dd", "head", "tail", "test", "date", "pwd"}

// Image describes what to build.
type Image struct {
	Name       string // the full reference, e.g. podvisor.test/busybox:1
	Busybox    string // path of a static busybox; "" finds /bin/busybox
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
	StopSignal string
	// Files are added to /bin: name → host path of the file.
	Files map[string]string
}

// Write writes an OCI image-layout tarball of the image to w.
func Write(w io.Writer, img Image) error {
	bb := img.Busybox
	if bb == "" {
		bb = "/bin/busybox"
	}
	bin, err := os.ReadFile(bb)
	if err != nil {
		return fmt.Errorf("busybox for the test image: %w", err)
	}
	extra := map[string][]byte{}
	for name, path := range img.Files {
		if extra[name], err = os.ReadFile(path); err != nil {
			return fmt.Errorf("file %s for the test image: %w", name, err)
		}
	}
	layer, err := layerTar(bin, extra)
	if err != nil {
		return err
	}
	layerDigest := digest(layer)
	env := img.Env
	if env == nil {
		env = []string{"PATH=/bin"}
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"created": time.Unix(0, 0).UTC(),
		"config": map[string]any{"Entrypoint": img.Entrypoint, "Cmd": img.Cmd, "Env": env,
			"WorkingDir": img.WorkingDir, "User": img.User, "StopSignal": img.StopSignal},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": len(layer)}},
	})
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
			"annotations": map[string]string{"io.containerd.image.name": img.Name, "org.opencontainers.image.ref.name": img.Name},
		}},
	})
	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(layer), layer}, {blob(config), config}, {blob(manifest), manifest},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// WriteFile writes the archive to path.
func WriteFile(path string, img Image) error {
	var buf bytes.Buffer
	if err := Write(&buf, img); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func layerTar(busybox []byte, extra map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "etc/", "tmp/", "proc/", "sys/", "dev/", "var/", "var/www/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: mode})
	}
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(busybox))})
	tw.Write(busybox)
	for _, a := range Applets {
		tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	}
	for name, data := range extra {
		tw.WriteHeader(&tar.Header{Name: "bin/" + name, Mode: 0o755, Size: int64(len(data))})
		tw.Write(data)
	}
	passwd := []byte("root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n")
	tw.WriteHeader(&tar.Header{Name: "etc/passwd", Mode: 0o644, Size: int64(len(passwd))})
	tw.Write(passwd)
	group := []byte("root:x:0:\nnogroup:x:65534:\n")
	tw.WriteHeader(&tar.Header{Name: "etc/group", Mode: 0o644, Size: int64(len(group))})
	tw.Write(group)
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func digest(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

func blob(b []byte) string { return fmt.Sprintf("blobs/sha256/%x", sha256.Sum256(b)) }
