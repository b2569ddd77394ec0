// Package rauc is the firmware driver for RAUC, through its D-Bus API
// (de.pengutronix.rauc.Installer, object /, on the system bus): install a
// bundle with InstallBundle, follow its Progress property and Completed
// signal, read the slots with GetSlotStatus, and Mark the booted slot good
// or bad.
//
// RAUC's API does not say whether the booted slot is a fresh install
// awaiting confirmation (the bootloaders' attempt counters are not
// exposed), so the driver records the slot it activated and the boot it
// did so in (firmware.Record): booting from that slot in a later boot is
// "pending", booting from another is a fallback.
package rauc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/podvisor/podvisor/firmware"
)

// D-Bus names of RAUC's service.
const (
	BusName   = "de.pengutronix.rauc"
	Interface = "de.pengutronix.rauc.Installer"
	Path      = dbus.ObjectPath("/")
)

// Name is the driver's name in the config.
const Name = "rauc"

func init() {
	firmware.Register(Name, func(c firmware.Config) (firmware.Driver, error) { return New(c.RAUCBus, c.StateDir), nil })
}

// Driver talks to the RAUC service.
type Driver struct {
	// Bus is the D-Bus address; "" is the system bus
	// (DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket).
	Bus string
	// StateDir keeps the install record.
	StateDir string
	// BootIDFile names the current boot (firmware.BootIDFile).
	BootIDFile string
}

// New returns a driver for the RAUC service on bus ("" system bus),
// keeping its install record in stateDir.
func New(bus, stateDir string) *Driver {
	return &Driver{Bus: bus, StateDir: stateDir, BootIDFile: firmware.BootIDFile}
}

// Name implements firmware.Driver.
func (d *Driver) Name() string { return Name }

func (d *Driver) connect(ctx context.Context) (*dbus.Conn, error) {
	addr := d.Bus
	if addr == "" {
		addr = os.Getenv("DBUS_SYSTEM_BUS_ADDRESS")
	}
	if addr == "" {
		addr = "unix:path=/run/dbus/system_bus_socket"
	}
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("rauc: D-Bus %s: %w", addr, err)
	}
	return conn, nil
}

// Install implements firmware.Driver: RAUC verifies the bundle's
// signature and writes it to the slots it chooses, then makes them the
// primary boot.
func (d *Driver) Install(ctx context.Context, bundle string, progress func(firmware.Progress)) error {
	conn, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Subscribe before the call: the first progress and a quick failure
	// follow it at once.
	for _, m := range [][]dbus.MatchOption{
		{dbus.WithMatchObjectPath(Path), dbus.WithMatchInterface("org.freedesktop.DBus.Properties"), dbus.WithMatchMember("PropertiesChanged")},
		{dbus.WithMatchObjectPath(Path), dbus.WithMatchInterface(Interface), dbus.WithMatchMember("Completed")},
		{dbus.WithMatchInterface("org.freedesktop.DBus"), dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, BusName)},
	} {
		if err := conn.AddMatchSignalContext(ctx, m...); err != nil {
			return fmt.Errorf("rauc: subscribing to the installer's signals: %w", err)
		}
	}
	signals := make(chan *dbus.Signal, 64)
	conn.Signal(signals)
	obj := conn.Object(BusName, Path)
	call := obj.CallWithContext(ctx, Interface+".InstallBundle", 0, bundle, map[string]dbus.Variant{})
	if derr, ok := call.Err.(dbus.Error); ok && derr.Name == "org.freedesktop.DBus.Error.UnknownMethod" {
		call = obj.CallWithContext(ctx, Interface+".Install", 0, bundle) // RAUC before 1.1
	}
	if call.Err != nil {
		return fmt.Errorf("rauc: install %s: %w", bundle, call.Err)
	}
	last := -1
	report := func(p firmware.Progress) {
		if p.Percent > last && progress != nil {
			last = p.Percent
			progress(p)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("rauc: stopped waiting for the install of %s (RAUC goes on with it): %w", bundle, ctx.Err())
		case sig, ok := <-signals:
			if !ok {
				return fmt.Errorf("rauc: D-Bus connection lost during the install of %s", bundle)
			}
			switch sig.Name {
			case "org.freedesktop.DBus.Properties.PropertiesChanged":
				if p, ok := progressOf(sig.Body); ok {
					report(p)
				}
			case "org.freedesktop.DBus.NameOwnerChanged":
				if len(sig.Body) == 3 && sig.Body[2] == "" {
					return fmt.Errorf("rauc: the RAUC service exited during the install of %s", bundle)
				}
			case Interface + ".Completed":
				if len(sig.Body) != 1 {
					return fmt.Errorf("rauc: Completed signal with %d values", len(sig.Body))
				}
				if code, _ := sig.Body[0].(int32); code != 0 {
					var lastErr string
					if v, err := obj.GetProperty(Interface + ".LastError"); err == nil {
						lastErr, _ = v.Value().(string)
					}
					return fmt.Errorf("rauc: install of %s failed (%d): %s", bundle, code, lastErr)
				}
				report(firmware.Progress{Percent: 100, Message: "Installing done."})
				return d.record(ctx, conn)
			}
		}
	}
}

// progressOf is the Progress property in a PropertiesChanged signal's
// body (interface, changed, invalidated): (percentage, message, depth).
func progressOf(body []any) (firmware.Progress, bool) {
	if len(body) < 2 {
		return firmware.Progress{}, false
	}
	if iface, _ := body[0].(string); iface != Interface {
		return firmware.Progress{}, false
	}
	changed, _ := body[1].(map[string]dbus.Variant)
	v, ok := changed["Progress"]
	if !ok {
		return firmware.Progress{}, false
	}
	var p struct {
		Percent int32
		Message string
		Depth   int32
	}
	if err := dbus.Store([]any{v.Value()}, &p); err != nil {
		return firmware.Progress{}, false
	}
	return firmware.Progress{Percent: min(max(int(p.Percent), 0), 100), Message: p.Message}, true
}

// record keeps which slot the install made primary, and in which boot.
func (d *Driver) record(ctx context.Context, conn *dbus.Conn) error {
	var primary string
	if err := conn.Object(BusName, Path).CallWithContext(ctx, Interface+".GetPrimary", 0).Store(&primary); err != nil {
		return fmt.Errorf("rauc: installed, but reading the primary slot: %w", err)
	}
	slots, err := slotStatus(ctx, conn)
	if err != nil {
		return fmt.Errorf("rauc: installed, but %w", err)
	}
	boot, err := firmware.BootID(d.BootIDFile)
	if err != nil {
		return fmt.Errorf("rauc: installed, but %w", err)
	}
	rec := firmware.Record{Driver: Name, Slot: primary, Version: slots[primary]["bundle.version"], BootID: boot, Time: time.Now().UTC()}
	if err := firmware.SaveRecord(d.StateDir, rec); err != nil {
		return fmt.Errorf("rauc: installed, but %w", err)
	}
	return nil
}

// slotStatus is GetSlotStatus: slot name → its string-valued fields
// ("state", "bootname", "boot-status", "bundle.version", …).
func slotStatus(ctx context.Context, conn *dbus.Conn) (map[string]map[string]string, error) {
	var raw []struct {
		Name   string
		Fields map[string]dbus.Variant
	}
	if err := conn.Object(BusName, Path).CallWithContext(ctx, Interface+".GetSlotStatus", 0).Store(&raw); err != nil {
		return nil, fmt.Errorf("reading the slots (GetSlotStatus): %w", err)
	}
	slots := make(map[string]map[string]string, len(raw))
	for _, s := range raw {
		f := make(map[string]string, len(s.Fields))
		for k, v := range s.Fields {
			if str, ok := v.Value().(string); ok {
				f[k] = str
			}
		}
		slots[s.Name] = f
	}
	return slots, nil
}

// Booted implements firmware.Driver.
func (d *Driver) Booted(ctx context.Context) (firmware.BootState, error) {
	conn, err := d.connect(ctx)
	if err != nil {
		return firmware.BootState{}, err
	}
	defer conn.Close()
	slots, err := slotStatus(ctx, conn)
	if err != nil {
		return firmware.BootState{}, fmt.Errorf("rauc: %w", err)
	}
	booted := ""
	for name, f := range slots {
		if f["state"] == "booted" {
			booted = name
		}
	}
	rec, bootID, err := firmware.ThisBoot(d.StateDir, Name, d.BootIDFile)
	if err != nil {
		return firmware.BootState{}, err
	}
	return bootState(rec, booted, slots[booted]["bundle.version"], bootID), nil
}

// bootState decides what the running system is from the install record,
// the booted slot and the current boot.
func bootState(rec *firmware.Record, booted, version, bootID string) firmware.BootState {
	st := firmware.BootState{Slot: booted, Version: version}
	switch {
	case rec == nil:
	case rec.BootID == bootID:
		st.AwaitingReboot = true
	case rec.Slot == booted:
		st.Pending = true
	default:
		st.FellBack = true
	}
	return st
}

// MarkGood implements firmware.Driver: RAUC's mark-good of the booted
// slot, then the install is settled.
func (d *Driver) MarkGood(ctx context.Context) error {
	return d.mark(ctx, "good")
}

// MarkBad implements firmware.Driver: RAUC's mark-bad of the booted slot,
// so that the bootloader boots the other one next.
func (d *Driver) MarkBad(ctx context.Context) error {
	return d.mark(ctx, "bad")
}

func (d *Driver) mark(ctx context.Context, state string) error {
	conn, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var slot, msg string
	if err := conn.Object(BusName, Path).CallWithContext(ctx, Interface+".Mark", 0, state, "booted").Store(&slot, &msg); err != nil {
		var derr dbus.Error
		if errors.As(err, &derr) && len(derr.Body) > 0 {
			return fmt.Errorf("rauc: mark %s booted: %v", state, derr.Body[0])
		}
		return fmt.Errorf("rauc: mark %s booted: %w", state, err)
	}
	return firmware.RemoveRecord(d.StateDir, Name)
}
