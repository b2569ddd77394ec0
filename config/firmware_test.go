package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFirmware(t *testing.T) {
	c := Default()
	if c.Firmware.Driver != "" || c.Firmware.CommitDeadline.Duration != 5*time.Minute {
		t.Errorf("default firmware %+v: want no driver, a 5m deadline", c.Firmware)
	}
	if got := c.FirmwareStateDir(); got != "/var/lib/podvisor/firmware" {
		t.Errorf("state dir %s", got)
	}
	c, _ = load(t, "firmware: {driver: swupdate, stateDir: /data/fw, commitDeadline: 90s,\n"+
		"  swupdate: {controlSocket: /run/swupdate/sockinstctrl, progressSocket: /run/swupdate/swupdateprog, select: 'stable,copy2'}}\n")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.FirmwareStateDir() != "/data/fw" || c.Firmware.SWUpdate.Select != "stable,copy2" || c.Firmware.CommitDeadline.Duration != 90*time.Second {
		t.Errorf("%+v", c.Firmware)
	}
	c, _ = load(t, "firmware: {driver: rauc, rauc: {bus: 'unix:path=/run/dbus/system_bus_socket'}}\n")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestFirmwareRefused(t *testing.T) {
	for _, tc := range []struct{ body, field, says string }{
		{"firmware: {driver: mender}\n", "firmware.driver", `"mender"`},
		{"firmware: {commitDeadline: 1s}\n", "firmware.commitDeadline", "below 10s"},
		{"firmware: {stateDir: fw}\n", "firmware.stateDir", "absolute"},
		{"firmware: {rauc: {bus: 'unix:path=/x'}}\n", "firmware.rauc", `firmware.driver is "", not rauc`},
		{"firmware: {driver: rauc, swupdate: {select: 'a,b'}}\n", "firmware.swupdate", `firmware.driver is "rauc", not swupdate`},
		{"firmware: {driver: rauc, rauc: {bus: /run/dbus/system_bus_socket}}\n", "firmware.rauc.bus", "D-Bus address"},
		{"firmware: {driver: swupdate, swupdate: {controlSocket: tmp/sock}}\n", "firmware.swupdate.controlSocket", "absolute"},
		{"firmware: {driver: swupdate, swupdate: {select: stable}}\n", "firmware.swupdate.select", "SOFTWARE_SET,MODE"},
	} {
		c, path := load(t, tc.body)
		err := c.Validate()
		var cerr *Error
		if !errors.As(err, &cerr) || len(cerr.Fields) != 1 {
			t.Errorf("%q: %v, want one bad field", tc.body, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "config "+path+": "+tc.field+": ") || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: %q, want %s saying %s", tc.body, err, tc.field, tc.says)
		}
	}
	if _, err := Parse([]byte("firmware: {driver: rauc, swupdte: {}}\n")); err == nil || !strings.Contains(err.Error(), "swupdte") {
		t.Errorf("misspelt key: %v", err)
	}
}
