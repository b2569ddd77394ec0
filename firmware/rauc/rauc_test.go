package rauc

import (
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/podvisor/podvisor/firmware"
)

func TestBootState(t *testing.T) {
	rec := &firmware.Record{Driver: Name, Slot: "rootfs.1", BootID: "boot-1"}
	for _, tc := range []struct {
		name   string
		rec    *firmware.Record
		booted string
		bootID string
		want   firmware.BootState
	}{
		{"no install", nil, "rootfs.0", "boot-1", firmware.BootState{Slot: "rootfs.0"}},
		{"installed in this boot", rec, "rootfs.0", "boot-1", firmware.BootState{Slot: "rootfs.0", AwaitingReboot: true}},
		{"booted the new slot", rec, "rootfs.1", "boot-2", firmware.BootState{Slot: "rootfs.1", Pending: true}},
		{"booted the old slot", rec, "rootfs.0", "boot-2", firmware.BootState{Slot: "rootfs.0", FellBack: true}},
	} {
		if got := bootState(tc.rec, tc.booted, "", tc.bootID); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestProgressOf(t *testing.T) {
	changed := func(v any) []any {
		return []any{Interface, map[string]dbus.Variant{"Progress": dbus.MakeVariant(v)}, []string{}}
	}
	for _, tc := range []struct {
		name string
		body []any
		want firmware.Progress
		ok   bool
	}{
		{"progress", changed([]any{int32(40), "Copying image", int32(2)}), firmware.Progress{Percent: 40, Message: "Copying image"}, true},
		{"clamped", changed([]any{int32(140), "", int32(1)}), firmware.Progress{Percent: 100}, true},
		{"another property", []any{Interface, map[string]dbus.Variant{"Operation": dbus.MakeVariant("installing")}, []string{}}, firmware.Progress{}, false},
		{"another interface", []any{"org.example", map[string]dbus.Variant{}, []string{}}, firmware.Progress{}, false},
		{"wrong type", changed("40%"), firmware.Progress{}, false},
		{"short", []any{Interface}, firmware.Progress{}, false},
	} {
		got, ok := progressOf(tc.body)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
