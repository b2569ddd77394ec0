package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Lines as containerd 1.6.20 and kubelet v1.34.4 write them.
const (
	sandboxLine = `time="2026-11-27T13:52:24.198375691Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:krestart-0-podvisor-bench,Uid:f03f,Namespace:default,Attempt:0,} returns sandbox id \"8396\""`
	otherLine   = `time="2026-11-27T13:52:24.300000000Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:krestart-10-podvisor-bench,Uid:a1,Namespace:default,Attempt:0,} returns sandbox id \"77aa\""`
	firstCreate = `time="2026-11-27T13:52:24.500000000Z" level=info msg="CreateContainer within sandbox \"8396\" for container &ContainerMetadata{Name:main,Attempt:0,}"`
	restart     = `time="2026-11-27T13:52:25.271250886Z" level=info msg="CreateContainer within sandbox \"8396\" for container &ContainerMetadata{Name:main,Attempt:1,}"`
	plegDeath   = `I1127 13:51:32.124143    1379 kubelet.go:2546] "SyncLoop (PLEG): event for pod" pod="default/krestart-0-podvisor-bench" event={"ID":"a24d","Type":"ContainerDied","Data":"3057"}`
	plegStart   = `I1127 13:51:31.122224    1379 kubelet.go:2546] "SyncLoop (PLEG): event for pod" pod="default/krestart-0-podvisor-bench" event={"ID":"a24d","Type":"ContainerStarted","Data":"85a4"}`
)

func TestCreateRequested(t *testing.T) {
	log := otherLine + "\n" + sandboxLine + "\n" + firstCreate + "\n" + restart + "\n"
	got, err := createRequested(log, "krestart-0-podvisor-bench")
	want := time.Date(2026, 11, 27, 13, 52, 25, 271250886, time.UTC)
	if err != nil || !got.Equal(want) {
		t.Errorf("createRequested = %v, %v; want %v", got, err, want)
	}
	if _, err := createRequested(sandboxLine+"\n"+firstCreate, "krestart-0-podvisor-bench"); err == nil {
		t.Error("no attempt 1: want an error")
	}
	if _, err := createRequested(log, "krestart-1-podvisor-bench"); err == nil {
		t.Error("another pod's sandbox: want an error")
	}
}

func TestPlegDied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.log")
	os.WriteFile(path, []byte(plegStart+"\n"+plegDeath+"\n"), 0o644)
	got, err := plegDied(path, "default/krestart-0-podvisor-bench")
	want := time.Date(time.Now().Year(), 11, 27, 13, 51, 32, 124143000, time.Local)
	if err != nil || !got.Equal(want) {
		t.Errorf("plegDied = %v, %v; want %v", got, err, want)
	}
}

func TestKlogTimeRejectsShortLines(t *testing.T) {
	if _, err := klogTime("I1127 13:51"); err == nil {
		t.Error("want an error")
	}
}
