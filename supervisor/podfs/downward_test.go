package podfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func fieldItem(path, field string) v1.DownwardAPIVolumeFile {
	return v1.DownwardAPIVolumeFile{Path: path, FieldRef: &v1.ObjectFieldSelector{FieldPath: field}}
}

// Each item is written with the value the downward API gives it, at its
// path below the volume.
func TestWriteDownwardAPI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "info")
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1",
			Labels: map[string]string{"b": "2", "a": `say "hi"`}, Annotations: map[string]string{"note": "x"}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}},
	}
	items := []v1.DownwardAPIVolumeFile{
		fieldItem("labels", "metadata.labels"),
		fieldItem("annotations", "metadata.annotations"),
		fieldItem("name", "metadata.name"),
		fieldItem("deep/er/uid", "metadata.uid"),
		fieldItem("node", "spec.nodeName"),
		fieldItem("ip", "status.hostIP"),
		fieldItem("label-b", "metadata.labels['b']"),
		{Path: "mem", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.memory"}},
	}
	if err := writeDownwardAPI(dir, pod, items, testNode); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"labels":      "a=\"say \\\"hi\\\"\"\nb=\"2\"\n",
		"annotations": "note=\"x\"\n",
		"name":        "web",
		"deep/er/uid": "uid-1",
		"node":        "dev",
		"ip":          "192.0.2.7",
		"label-b":     "2",
		"mem":         "1073741824", // no limit: the node's allocatable
	} {
		if got := readFile(t, filepath.Join(dir, path)); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	// Rewritten at every start: a label changed since shows.
	pod.Labels["b"] = "3"
	if err := writeDownwardAPI(dir, pod, items[6:7], testNode); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "label-b")); got != "3" {
		t.Errorf("rewritten label %q", got)
	}
}

func TestWriteDownwardAPIRefusals(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "info"), filepath.Join(base, "outside")
	os.MkdirAll(dir, 0o755)
	os.MkdirAll(outside, 0o755)
	os.Symlink(outside, filepath.Join(dir, "link"))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	for _, tc := range []struct {
		item    v1.DownwardAPIVolumeFile
		wantErr string
	}{
		{fieldItem("link/name", "metadata.name"), "item link/name: "},
		{fieldItem("x", "spec.unknown"), `item x: fieldPath "spec.unknown" is not supported`},
		{v1.DownwardAPIVolumeFile{Path: "x"}, "item x: a fieldRef or resourceFieldRef is required"},
		{v1.DownwardAPIVolumeFile{Path: "x", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "gone", Resource: "limits.cpu"}},
			`item x: resourceFieldRef: container "gone" not found`},
	} {
		err := writeDownwardAPI(dir, pod, []v1.DownwardAPIVolumeFile{tc.item}, testNode)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want %q", tc.item.Path, err, tc.wantErr)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("written through a link: %v", entries)
	}
}
