package podfs

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func fieldItem(path, field string) v1.DownwardAPIVolumeFile {
	return v1.DownwardAPIVolumeFile{Path: path, FieldRef: &v1.ObjectFieldSelector{FieldPath: field}}
}

// Each item is given the value the downward API gives it, at its path,
// with its mode or the volume's.
func TestDownwardPayload(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1",
			Labels: map[string]string{"b": "2", "a": `say "hi"`}, Annotations: map[string]string{"note": "x"}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}},
	}
	mode := int32(0o400)
	items := []v1.DownwardAPIVolumeFile{
		fieldItem("labels", "metadata.labels"),
		fieldItem("annotations", "metadata.annotations"),
		fieldItem("name", "metadata.name"),
		fieldItem("deep/er/uid", "metadata.uid"),
		fieldItem("node", "spec.nodeName"),
		fieldItem("ip", "status.hostIP"),
		fieldItem("label-b", "metadata.labels['b']"),
		{Path: "mem", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.memory"}, Mode: &mode},
	}
	got := map[string]fileProjection{}
	if err := downwardPayload(got, pod, items, 0o644, testNode); err != nil {
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
		wantMode := int32(0o644)
		if path == "mem" {
			wantMode = 0o400
		}
		if fp := got[path]; string(fp.Data) != want || fp.Mode != wantMode {
			t.Errorf("%s: %q %o, want %q %o", path, fp.Data, fp.Mode, want, wantMode)
		}
	}
}

func TestDownwardPayloadRefusals(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	for _, tc := range []struct {
		item    v1.DownwardAPIVolumeFile
		wantErr string
	}{
		{fieldItem("x", "spec.unknown"), `fieldPath "spec.unknown" is not supported`},
		{v1.DownwardAPIVolumeFile{Path: "x"}, "a fieldRef or resourceFieldRef is required"},
		{v1.DownwardAPIVolumeFile{Path: "x", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "gone", Resource: "limits.cpu"}},
			`resourceFieldRef: container "gone" not found`},
	} {
		err := downwardPayload(map[string]fileProjection{}, pod, []v1.DownwardAPIVolumeFile{tc.item}, 0o644, testNode)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want %q", tc.item.Path, err, tc.wantErr)
		}
	}
}
