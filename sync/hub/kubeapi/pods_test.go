package kubeapi

import (
	"slices"
	"testing"
)

// Pods gives the dashboard every pod as its device names it: the two
// devices' "web" under that name, each on its device, no mirror owner;
// the same objects the API lists under their mirror names.
func TestPodsAsDevicesNameThem(t *testing.T) {
	f := twoDevices(t, Config{})
	var got []string
	for _, p := range f.api.Pods() {
		got = append(got, p.Spec.NodeName+"/"+p.Namespace+"/"+p.Name)
		if len(p.OwnerReferences) != 0 {
			t.Errorf("%s/%s on %s keeps the mirror pod's owner %v", p.Namespace, p.Name, p.Spec.NodeName, p.OwnerReferences)
		}
	}
	slices.Sort(got)
	if want := []string{"dev1/default/db", "dev1/default/web", "dev2/default/web"}; !slices.Equal(got, want) {
		t.Fatalf("Pods %v, want %v", got, want)
	}
	if names := f.podNames("/api/v1/pods"); names != "default/db-dev1 default/web-dev1 default/web-dev2" {
		t.Fatalf("the API lists %s after Pods, want the mirror names kept", names)
	}
}
