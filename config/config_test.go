package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// load writes body as a config file and loads it.
func load(t *testing.T, body string) (*Config, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "podvisor.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatalf("%q: %v", body, err)
	}
	return c, path
}

func dur(d time.Duration) Duration { return Duration{Duration: d} }

// The defaults are the ones docs/configuration.md documents and the daemon has always
// had; without a file, the config is the defaults and valid.
func TestDefaults(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("the defaults are invalid: %v", err)
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"manifests", c.Manifests, "/etc/podvisor/manifests"},
		{"dataDir", c.DataDir, "/var/lib/podvisor"},
		{"socket", c.Socket, "/run/podvisor/podvisor.sock"},
		{"nodeName", c.NodeName, ""},
		{"manifestResync", c.ManifestResync, dur(time.Minute)},
		{"backoff", c.Backoff, Backoff{Initial: dur(10 * time.Second), Max: dur(300 * time.Second), Reset: dur(10 * time.Minute)}},
		{"logs.maxSize", c.Logs.MaxSize.Value(), int64(10 << 20)},
		{"logs.maxFiles", c.Logs.MaxFiles, 5},
		{"gc", c.GC, GC{MaxDeadPerContainer: 1, MaxDeadContainers: 100}},
		{"cgroups", c.Cgroups, Cgroups{Root: "podvisor", Mount: "/sys/fs/cgroup", Driver: "cgroupfs"}},
		{"configDir", c.ConfigDir, "/etc/podvisor"},
		{"node.maxPods", c.Node.MaxPods, int64(110)},
		{"eviction.hard", len(c.EvictionHard()), 4},
		{"eviction.hard[memory.available]", c.EvictionHard()["memory.available"], "100Mi"},
		{"eviction.pressureTransitionPeriod", c.Eviction.PressureTransitionPeriod, dur(5 * time.Minute)},
		{"eviction.monitorPeriod", c.Eviction.MonitorPeriod, dur(10 * time.Second)},
		{"eviction.maxPodGracePeriod", c.Eviction.MaxPodGracePeriod, dur(0)},
		{"containerd.imageGC", c.Containerd.ImageGC, ImageGC{HighThresholdPercent: 85, LowThresholdPercent: 80, MinimumAge: dur(2 * time.Minute)}},
		{"containerd.sandboxDir", c.Containerd.SandboxDir, "/run/podvisor/sandbox"},
		{"containerd.shimGroup", c.Containerd.ShimGroup, "device"},
		{"containerd address", c.ContainerdAddress(), "/run/containerd/containerd.sock"},
		{"containerd named", c.ContainerdNamed(), false},
		{"managed root", c.ManagedRoot(), "/var/lib/podvisor/containerd/root"},
		{"hub.url", c.Hub.URL, ""},
		{"security.allowUntrustedManifests", c.Security.AllowUntrustedManifests, false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if p, err := c.Hub.PodPolicy(0); err != nil || p.Level() != "baseline:latest" {
		t.Errorf("default hub pod policy: %v, %v", p, err)
	}
}

// A file sets what it names and keeps every other default; values that
// have always meant "the default" when written empty still do.
func TestLoadOverDefaults(t *testing.T) {
	c, path := load(t, `
dataDir: /data/pv
manifestResync:     # no value: the default
backoff: {initial: 1s, reset: null}
logs: {maxSize: 64Ki}
gc: {maxDeadContainers: 0}
cgroups: {root: "", mount: ""}
node: {maxPods: 0}
eviction: {hard: {memory.available: 50Mi}}
containerd: {managed: true}
hub: {url: "mqtt://hub:1883", heartbeat: 5s}
security: {allowUntrustedManifests: true}
`)
	if c.File != path {
		t.Errorf("File %q, want %q", c.File, path)
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"dataDir", c.DataDir, "/data/pv"},
		{"manifests", c.Manifests, DefaultManifests},
		{"backoff.initial", c.Backoff.Initial, dur(time.Second)},
		{"backoff.max", c.Backoff.Max, dur(300 * time.Second)},
		{"backoff.reset", c.Backoff.Reset, dur(10 * time.Minute)},
		{"manifestResync", c.ManifestResync, dur(time.Minute)},
		{"logs.maxSize", c.Logs.MaxSize.Value(), int64(64 << 10)},
		{"logs.maxFiles", c.Logs.MaxFiles, 5},
		{"gc.maxDeadContainers", c.GC.MaxDeadContainers, 0}, // 0: no bound, not the default
		{"gc.maxDeadPerContainer", c.GC.MaxDeadPerContainer, 1},
		{"cgroups.root", c.Cgroups.Root, ""}, // "": no cgroups, not the default
		{"cgroups.mount", c.Cgroups.Mount, "/sys/fs/cgroup"},
		{"node.maxPods", c.Node.MaxPods, int64(DefaultMaxPods)}, // the kubelet's 0
		{"eviction.hard", len(c.EvictionHard()), 1},             // setting one drops the defaults
		{"containerd named", c.ContainerdNamed(), true},
		{"containerd address", c.ContainerdAddress(), DefaultManagedSocket},
		{"managed root", c.ManagedRoot(), "/data/pv/containerd/root"},
		{"hub.heartbeat", c.Hub.Heartbeat, dur(5 * time.Second)},
		{"update.commitTimeout", c.Update.CommitTimeout, dur(5 * time.Minute)},
		{"security.allowUntrustedManifests", c.Security.AllowUntrustedManifests, true},
		{"security.forbidPrivileged", c.Security.ForbidPrivileged, false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Any containerd setting asks for containerd, even one written at its
// default value; an empty section does not.
func TestContainerdNamed(t *testing.T) {
	for body, want := range map[string]bool{
		"":                                     false,
		"containerd: {}\n":                     false,
		"containerd: {managed: false}\n":       false,
		"containerd: {address: /run/c.sock}\n": true,
		"containerd: {imageGC: {lowThresholdPercent: 80}}\n": true,
		"containerd: {sandboxDir: /run/sb}\n":                true,
		"containerd: {noPivotRoot: true}\n":                  true,
		"containerd: {shimGroup: pod}\n":                     true,
		"containerd: {shimGroup: container}\n":               true,
	} {
		if c, _ := load(t, body); c.ContainerdNamed() != want {
			t.Errorf("%q: named %v, want %v", body, !want, want)
		}
	}
	c := Default()
	c.Containerd.Snapshotter = "native"
	if !c.ContainerdNamed() {
		t.Error("a config built in code with a snapshotter does not name containerd")
	}
}

// A key the schema does not know is refused with its name and the file's,
// not ignored; so is a value of the wrong type, and a file too large.
func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string][]string{
		"manifest: /x\n": {`unknown field "manifest"`},
		"hub: {url: mqtt://h:1, alowUnsigned: true}\n": {`unknown field "hub.alowUnsigned"`},
		"hub: {allowunsigned: true}\n":                 {`unknown field "hub.allowunsigned"`},
		"containerd: {imageGc: {}}\n":                  {`unknown field "containerd.imageGc"`},
		"logs: {maxFiles: 1}\nlogs: {maxFiles: 2}\n":   {`key "logs" already set`},
		"backoff: {initial: soon}\n":                   {`"soon"`},
		"logs: {maxSize: lots}\n":                      {"quantities must match"},
		"node: {maxPods: many}\n":                      {"maxPods"},
		"- a list\n":                                   {"cannot unmarshal array"},
	} {
		path := filepath.Join(dir, "c.yaml")
		os.WriteFile(path, []byte(body), 0o644)
		_, err := Load(path)
		for _, w := range append(want, "config "+path+": ") {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %v does not say %s", body, err, w)
			}
		}
	}
	big := filepath.Join(dir, "big.yaml")
	os.WriteFile(big, []byte("nodeName: "+strings.Repeat("x", MaxFileSize)+"\n"), 0o644)
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over %d bytes: %v", MaxFileSize, err)
	}
	if _, err := Load(filepath.Join(dir, "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}

// Every validation error names the file and the field, and says what is
// wrong with the value.
// One broker, several in url (as --hub takes them), or the list form.
func TestHubBrokers(t *testing.T) {
	for _, c := range []struct {
		hub  Hub
		want string
	}{
		{Hub{}, ""},
		{Hub{URL: "mqtts://a:8883"}, "mqtts://a:8883"},
		{Hub{URL: "mqtts://a:8883, mqtts://b:8883,"}, "mqtts://a:8883 mqtts://b:8883"},
		{Hub{URLs: []string{"mqtts://a:8883", "mqtts://b:8883", "mqtts://c:8883"}}, "mqtts://a:8883 mqtts://b:8883 mqtts://c:8883"},
	} {
		if got := strings.Join(c.hub.Brokers(), " "); got != c.want {
			t.Errorf("%+v: %q, want %q", c.hub, got, c.want)
		}
	}
}

func TestValidateNamesFileAndField(t *testing.T) {
	for _, tc := range []struct {
		body string
		want []string // the field first
	}{
		{"manifestResync: 0s\n", []string{"manifestResync", "positive"}},
		{"backoff: {initial: 1m, max: 10s}\n", []string{"backoff.initial", "1m0s", "backoff.max (10s)"}},
		{"backoff: {initial: 0s}\n", []string{"backoff.initial", "positive", "0s"}},
		{"backoff: {max: -1s}\n", []string{"backoff.max", "positive"}},
		{"backoff: {reset: -1s}\n", []string{"backoff.reset", "positive"}},
		{"logs: {maxSize: 1Ki}\n", []string{"logs.maxSize", "1Ki", "4Ki"}},
		{"logs: {maxFiles: 0}\n", []string{"logs.maxFiles", "at least 1"}},
		{"gc: {maxDeadPerContainer: 0}\n", []string{"gc.maxDeadPerContainer", "logs --previous"}},
		{"gc: {maxDeadContainers: -1}\n", []string{"gc.maxDeadContainers", "-1"}},
		{"cgroups: {driver: openrc}\n", []string{"cgroups.driver", `"openrc"`}},
		{"node: {maxPods: -3}\n", []string{"node.maxPods", "-3"}},
		{"shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 20}, {priority: 9, shutdownGracePeriodSeconds: -1}]\n",
			[]string{"shutdownGracePeriodByPodPriority[1].shutdownGracePeriodSeconds", ">= 0"}},
		{"eviction: {hard: {memory.free: 1Mi}}\n", []string{"eviction.hard", `"memory.free"`}},
		{"eviction: {hard: {memory.available: lots}}\n", []string{"eviction.hard[memory.available]"}},
		{"eviction: {soft: {memory.available: 300Mi}}\n", []string{"eviction.soft[memory.available]", "eviction.softGracePeriod"}},
		{"eviction: {softGracePeriod: {memory.available: 30s}}\n", []string{"eviction.softGracePeriod[memory.available]", "no soft threshold"}},
		{"eviction: {monitorPeriod: 10ms}\n", []string{"eviction.monitorPeriod", "100ms"}},
		{"eviction: {maxPodGracePeriod: -5s}\n", []string{"eviction.maxPodGracePeriod", "negative"}},
		{"containerd: {imageGC: {highThresholdPercent: 70}}\n", []string{"containerd.imageGC", "lowThresholdPercent (80)", "highThresholdPercent (70)"}},
		{"containerd: {imageGC: {highThresholdPercent: 101, lowThresholdPercent: 0}}\n", []string{"containerd.imageGC", "(101)"}},
		{"containerd: {imageGC: {minimumAge: -1m}}\n", []string{"containerd.imageGC.minimumAge", "negative"}},
		{"containerd: {shimGroup: node}\n", []string{"containerd.shimGroup", `"node"`, "device, pod or container"}},
		{"hub: {url: http://hub:80}\n", []string{"hub.url", `"http://hub:80"`, "mqtts://"}},
		{"hub: {heartbeat: -1s}\n", []string{"hub.heartbeat", "negative"}},
		{"hub: {urls: [mqtts://a:8883, tcp://b:1883]}\n", []string{"hub.urls", `"tcp://b:1883"`, "mqtts://"}},
		{"hub: {urls: [mqtts://a:8883, mqtt://b:1883]}\n", []string{"hub.urls", `"mqtt://b:1883"`, "every broker must be mqtts://"}},
		{"hub: {url: 'mqtts://a:8883,mqtt://b:1883'}\n", []string{"hub.url", `"mqtt://b:1883"`, "not both"}},
		{"hub: {url: mqtts://a:8883, urls: [mqtts://b:8883]}\n", []string{"hub.urls", "hub.url (or --hub) or hub.urls"}},
		{"hub: {urls: [' ']}\n", []string{"hub.urls", "no broker URL"}},
		{"hub: {outbox: {maxRows: -1}}\n", []string{"hub.outbox.maxRows", "-1"}},
		{"update: {commitTimeout: 5s}\n", []string{"update.commitTimeout", "5s", "10s to 24h"}},
		{"hub: {outbox: {maxBytes: -1Mi}}\n", []string{"hub.outbox.maxBytes", "-1Mi"}},
		{"objects: {maxObjects: -1}\n", []string{"objects.maxObjects", "-1"}},
		{"objects: {maxBytes: -1Mi}\n", []string{"objects.maxBytes", "-1Mi"}},
		// The hub section's security rules.
		{"hub: {url: mqtt://h:1883, key: /etc/podvisor/hub.pub, allowUnsigned: true}\n", []string{"hub.allowUnsigned", "hub.key", "/etc/podvisor/hub.pub"}},
		{"hub: {podSecurity: strict}\n", []string{"hub.podSecurity", `"strict"`, "privileged, baseline, restricted"}},
		{"hub: {podSecurityVersion: '1.30'}\n", []string{"hub.podSecurityVersion", `"latest" or "v1.x"`}},
		{"hub: {allowRootProcessPods: true}\n", []string{"hub.allowRootProcessPods", "allowProcessPods"}},
		{"hub: {images: {registries: [ghcr.io, busybox]}}\n", []string{"hub.images.registries[1]", `"busybox"`}},
		{"hub: {images: {shared: [vendor-tools:2, Vendor App]}}\n", []string{"hub.images.shared[1]", `"Vendor App"`}},
	} {
		c, path := load(t, tc.body)
		err := c.Validate()
		var cerr *Error
		if !errors.As(err, &cerr) || len(cerr.Fields) != 1 || cerr.File != path {
			t.Errorf("%q: error %#v, want one *Error for %s", tc.body, err, path)
			continue
		}
		if !strings.HasPrefix(err.Error(), "config "+path+": "+tc.want[0]) {
			t.Errorf("%q: error %q does not start with the file and %s", tc.body, err, tc.want[0])
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not say %s", tc.body, err, w)
			}
		}
	}
}

// Every bad setting is reported at once, so a config is fixed in one go.
func TestValidateReportsEveryField(t *testing.T) {
	c, _ := load(t, "logs: {maxFiles: 0}\ngc: {maxDeadPerContainer: 0}\ncgroups: {driver: x}\n")
	var cerr *Error
	if err := c.Validate(); !errors.As(err, &cerr) || len(cerr.Fields) != 3 || strings.Contains(err.Error(), "\n") {
		t.Fatalf("three bad settings: %v", err)
	}
}

// A config built in code, without a file, says "config:" and the field;
// settings flags may set are checked after them (--hub-key with
// allowUnsigned in the file).
func TestValidateWithoutFileAndAfterFlags(t *testing.T) {
	c := Default()
	c.Manifests = ""
	c.Logs.MaxSize = resource.MustParse("1")
	err := c.Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "config: manifests: ") || !strings.Contains(err.Error(), "logs.maxSize") {
		t.Fatalf("error %v", err)
	}
	c, _ = load(t, "hub: {url: mqtt://h:1883, allowUnsigned: true}\n")
	if err := c.Validate(); err != nil {
		t.Fatalf("allowUnsigned alone: %v", err)
	}
	c.Hub.Key = "/tmp/hub.pub" // --hub-key
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "hub.allowUnsigned") || !strings.Contains(err.Error(), "--hub-key") {
		t.Fatalf("allowUnsigned with --hub-key: %v", err)
	}
	if err := c.FieldError("shim", errors.New("no such file")); err.Error() != "config "+c.File+": shim: no such file" {
		t.Fatalf("FieldError: %q", err)
	}
}

func TestHubPodPolicy(t *testing.T) {
	c, _ := load(t, "hub: {podSecurity: restricted, podSecurityVersion: v1.30, allowProcessPods: true}\n")
	p, err := c.Hub.PodPolicy(1000)
	if err != nil || p.Level() != "restricted:v1.30" {
		t.Fatalf("hub pod policy %v, %v", p, err)
	}
}

// probes.ebpf defaults to true, a file may turn it off, and a misspelt
// key under probes is refused rather than silently ignored.
func TestProbesEBPF(t *testing.T) {
	if !Default().Probes.EBPF {
		t.Fatal("probes.ebpf defaults to false, want true")
	}
	for doc, want := range map[string]bool{"nodeName: a\n": true, "probes: {ebpf: false}\n": false, "probes: {}\n": true} {
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if c.Probes.EBPF != want {
			t.Errorf("%q: probes.ebpf = %v, want %v", doc, c.Probes.EBPF, want)
		}
	}
	for _, doc := range []string{"probes: {ebpF: false}\n", "probes: {ebpf: \"no\"}\n"} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "ebp") {
			t.Errorf("%q: err = %v, want one naming the key", doc, err)
		}
	}
}

// probes.listen picks the best listen path; probes.ebpf: false still
// means sockdiag; a bad value or a contradiction is refused naming the
// field.
func TestProbesListen(t *testing.T) {
	for doc, want := range map[string]ListenPath{
		"probes: {listen: false}\n":            ListenOff,
		"nodeName: a\n":                        ListenEBPF,
		"probes: {ebpf: false}\n":              ListenSockDiag,
		"probes: {listen: sockdiag}\n":         ListenSockDiag,
		"probes: {listen: \"off\"}\n":          ListenOff,
		"probes: {listen: ebpf}\n":             ListenEBPF,
		"probes: {listen: off, ebpf: false}\n": ListenOff,
	} {
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if got := c.Probes.ListenMode(); got != want {
			t.Errorf("%q: listen mode %q, want %q", doc, got, want)
		}
	}
	for doc, want := range map[string]string{
		"probes: {listen: bpf}\n":               `probes.listen: "bpf" is none of ebpf, sockdiag, off`,
		"probes: {listen: EBPF}\n":              `probes.listen: "EBPF" is none`,
		"probes: {listen: ebpf, ebpf: false}\n": "probes.listen: ebpf contradicts probes.ebpf: false",
		"probes: {listen: true}\n":              "want ebpf, sockdiag or off, got true",
		"probes: {listen: 3}\n":                 "probes.listen: want ebpf, sockdiag or off, got 3",
	} {
		c, err := Parse([]byte(doc))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want one containing %q", doc, err, want)
		}
	}
}

// A setting the file gives as 0 where 0 means "the default" loads as the
// default, so nothing past the config applies a default of its own.
func TestZeroMeansTheDefault(t *testing.T) {
	c, err := Parse([]byte("hub: {heartbeat: 0s, outbox: {maxRows: 0, maxBytes: 0}}\nshutdownGracePeriodByPodPriority: []\nnode: {maxPods: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if c.Hub.Heartbeat != d.Hub.Heartbeat || c.Hub.Outbox.MaxRows != d.Hub.Outbox.MaxRows || c.Hub.Outbox.MaxBytes.Cmp(d.Hub.Outbox.MaxBytes) != 0 ||
		len(c.ShutdownGracePeriodByPodPriority) != 2 || c.Node.MaxPods != d.Node.MaxPods {
		t.Errorf("loaded %+v / %+v / %v / %d, want the defaults", c.Hub.Heartbeat, c.Hub.Outbox, c.ShutdownGracePeriodByPodPriority, c.Node.MaxPods)
	}
}
