package api

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

func (f *fakeBackend) Images() (ImageList, error) {
	return ImageList{Images: []runtime.Image{{Name: "docker.io/library/busybox:1", Size: 42}},
		Failed: []ImportFailure{{File: "/data/images/bad.tar", Error: "not an archive"}}}, nil
}

func (f *fakeBackend) ImportImage(path string) ([]string, error) {
	if path != "/tmp/x.tar" {
		return nil, errors.New("import: no such file " + path)
	}
	return []string{"docker.io/library/x:1"}, nil
}

func (f *fakeBackend) RemoveImage(name string) error {
	if name != "docker.io/library/busybox:1" {
		return errors.New("image " + name + " not found")
	}
	return nil
}

func (f *fakeBackend) ExecTarget(ns, name, container string) (ExecTarget, error) {
	if name != "web" {
		return ExecTarget{}, errors.New("pod not found")
	}
	return ExecTarget{Runtime: "containerd", ContainerID: name + "-" + container}, nil
}

func TestImagesAndExecRoutes(t *testing.T) {
	c := serve(t, newFake(testPod("web", "app")))
	ctx := context.Background()
	list, err := c.Images(ctx)
	if err != nil || len(list.Images) != 1 || list.Images[0].Size != 42 || len(list.Failed) != 1 {
		t.Fatalf("images: %+v %v", list, err)
	}
	names, err := c.ImportImage(ctx, "/tmp/x.tar")
	if err != nil || len(names) != 1 || names[0] != "docker.io/library/x:1" {
		t.Fatalf("import: %v %v", names, err)
	}
	if _, err := c.ImportImage(ctx, "/nope.tar"); err == nil || !strings.Contains(err.Error(), "/nope.tar") {
		t.Fatalf("failed import: %v", err)
	}
	// A name with slashes and a colon reaches the backend whole.
	if err := c.RemoveImage(ctx, "docker.io/library/busybox:1"); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveImage(ctx, "other:1"); err == nil || !strings.Contains(err.Error(), "other:1") {
		t.Fatalf("remove missing: %v", err)
	}
	target, err := c.ExecTarget(ctx, "default", "web", "app")
	if err != nil || target.ContainerID != "web-app" {
		t.Fatalf("exec target: %+v %v", target, err)
	}
	if _, err := c.ExecTarget(ctx, "default", "nope", ""); err == nil {
		t.Fatal("exec target of a missing pod")
	}
}
