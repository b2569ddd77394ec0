package podfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// The kubelet's hosts file, byte for byte (kubelet_pods_test.go,
// TestManagedHostsFileContent).
func TestManagedHostsFile(t *testing.T) {
	got := string(managedHostsFile([]string{"10.0.0.5"}, "web", []v1.HostAlias{
		{IP: "123.45.67.89", Hostnames: []string{"foo", "bar", "baz"}},
		{IP: "456.78.90.123", Hostnames: []string{"park", "doo", "boo"}}}))
	want := "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n" +
		"10.0.0.5\tweb\n" +
		"\n" +
		"# Entries added by HostAliases.\n" +
		"123.45.67.89\tfoo\tbar\tbaz\n" +
		"456.78.90.123\tpark\tdoo\tboo\n"
	if got != want {
		t.Fatalf("hosts file:\n%s\nwant:\n%s", got, want)
	}
	node := string(nodeHostsFile([]byte("127.0.0.1\tlocalhost\n"), nil))
	if node != "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n" {
		t.Fatalf("host-network hosts file %q", node)
	}
}

// The file is written once: the address the pod network put in it stays
// when another container of the pod starts.
func TestWritePodHostsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	pod := &v1.Pod{}
	if err := writePodHosts(path, pod, "web"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), managedHostsHeader) || !strings.Contains(string(data), podIPPlaceholder+"\tweb\n") {
		t.Fatalf("hosts file %q", data)
	}
	os.WriteFile(path, []byte(strings.Replace(string(data), podIPPlaceholder, "10.88.0.7", 1)), 0o644)
	if err := writePodHosts(path, pod, "web"); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), "10.88.0.7\tweb\n") {
		t.Fatalf("rewritten: %q", data)
	}
}

func TestMountsOwnHosts(t *testing.T) {
	own := &v1.Container{VolumeMounts: []v1.VolumeMount{{Name: "h", MountPath: "/etc/hosts"}}}
	if !mountsOwnHosts(own) || mountsOwnHosts(&v1.Container{VolumeMounts: []v1.VolumeMount{{MountPath: "/etc"}}}) {
		t.Fatal("a container mounting /etc/hosts must keep its own, and only then")
	}
}
