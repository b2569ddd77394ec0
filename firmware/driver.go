// Package firmware moves operating-system updates through the tool a
// device already uses (RAUC or SWUpdate) and gates their commit on
// podvisor's own health check.
//
// podvisor invents no bundle format: a Driver hands a bundle file to the
// tool, reports its progress in percent, and after the reboot into the new
// system tells the tool to keep it (MarkGood) or to fall back (MarkBad).
// Confirm is that decision, as a function of the boot state and the
// health check; Open picks the driver the config names.
package firmware

import (
	"context"
	"errors"
	"fmt"
)

// Progress is how far an install has come.
type Progress struct {
	// Percent is 0..100, never decreasing within one install.
	Percent int
	// Message is the tool's own description of the current step.
	Message string
}

// BootState is what the running system is, as the update tool sees it.
type BootState struct {
	// Pending: the running system is a freshly installed one that nobody
	// confirmed yet (RAUC: the slot podvisor's last install activated;
	// SWUpdate: ustate 1 "installed" or 2 "testing").
	Pending bool
	// FellBack: the last install did not come up and the bootloader went
	// back to the previous system (RAUC: booted from another slot than the
	// one installed; SWUpdate: ustate 3 "failed").
	FellBack bool
	// AwaitingReboot: an install ended in this very boot; the new system
	// runs after the next reboot (nothing to confirm yet).
	AwaitingReboot bool
	// Slot names the running system for reports: the RAUC slot
	// ("rootfs.1"), or SWUpdate's update state.
	Slot string
	// Version is the installed bundle's version where the tool records it.
	Version string
}

// Driver is one update tool.
type Driver interface {
	// Name is "rauc" or "swupdate".
	Name() string
	// Install installs the bundle file into the inactive system, calling
	// progress as it goes, and returns when the install has ended: the
	// error carries the tool's own message.
	Install(ctx context.Context, bundle string, progress func(Progress)) error
	// Booted reports what the running system is.
	Booted(ctx context.Context) (BootState, error)
	// MarkGood commits the running system (after podvisor's health check
	// passed) and settles a pending or fallen-back install.
	MarkGood(ctx context.Context) error
	// MarkBad rejects the pending system, so that the bootloader falls
	// back at the next boot.
	MarkBad(ctx context.Context) error
}

// ErrNoDriver is Open's answer for a device without an update tool
// configured: firmware updates are refused.
var ErrNoDriver = errors.New("firmware updates are not configured on this device (config firmware.driver is empty)")

// Config selects and configures a driver; config.Firmware converts to it.
type Config struct {
	// Driver is "rauc", "swupdate" or "" (none).
	Driver string
	// StateDir is where a driver keeps what the tool does not (RAUC: which
	// slot podvisor's last install activated).
	StateDir string
	// RAUC's D-Bus address; "" is the system bus.
	RAUCBus string
	// SWUpdate's control and progress sockets; "" finds them.
	SWUpdateControl, SWUpdateProgress string
	// SWUpdateSelect is the software set and mode ("stable,copy2") sent
	// with an install; "" sends none.
	SWUpdateSelect string
}

// Opener makes a driver from its config; the driver packages register
// theirs with Register, so that cmd/podvisor links only those it imports.
type Opener func(Config) (Driver, error)

var openers = map[string]Opener{}

// Register makes a driver available to Open under name.
func Register(name string, open Opener) { openers[name] = open }

// Open returns the driver cfg names, ErrNoDriver for none.
func Open(cfg Config) (Driver, error) {
	if cfg.Driver == "" {
		return nil, ErrNoDriver
	}
	open, ok := openers[cfg.Driver]
	if !ok {
		return nil, fmt.Errorf("firmware.driver %q is not built into this podvisor", cfg.Driver)
	}
	return open(cfg)
}
