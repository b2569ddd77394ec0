package runtime

import (
	"errors"
	"testing"
)

func TestPluginsRegisterByName(t *testing.T) {
	p := Plugin{Name: "test-plugin", New: func(any, Env) (Runtime, error) { return nil, nil }}
	RegisterPlugin(p)
	t.Cleanup(func() {
		plugins.Lock()
		delete(plugins.byName, p.Name)
		plugins.Unlock()
	})
	if got, ok := PluginNamed("test-plugin"); !ok || got.Name != "test-plugin" {
		t.Fatalf("PluginNamed = %+v, %v", got, ok)
	}
	if _, ok := PluginNamed("absent"); ok {
		t.Fatal("an absent plugin was found")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a name twice did not panic")
		}
	}()
	RegisterPlugin(p)
}

func TestUnavailableErrorSaysWhatToDo(t *testing.T) {
	cause := errors.New("containerd is not configured on this device (containerd.address)")
	err := error(&UnavailableError{Err: cause, Hint: "set runtimeClassName: process to run host processes"})
	if err.Error() != "containerd is not configured on this device (containerd.address); set runtimeClassName: process to run host processes" {
		t.Fatalf("message %q", err)
	}
	if !errors.Is(err, cause) {
		t.Fatal("the cause is not unwrapped")
	}
	if (&UnavailableError{Err: cause}).Error() != cause.Error() {
		t.Fatal("a hint-less error is not its cause's")
	}
}
