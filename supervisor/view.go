package supervisor

import (
	"net"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podview"
)

// StatusInvalid is the STATUS of a manifest file that was rejected.
const StatusInvalid = podview.StatusInvalid

// record logs an event about a pod instance and keeps it for describe.
func (d *Daemon) record(in *lifecycle.Instance, typ, reason, msg string) {
	if in == nil {
		return
	}
	d.addEvent(podview.Note{Key: in.Key(), Type: typ, Reason: reason, Message: msg})
}

// addEvent logs an event, queues it for the hub and keeps it for describe.
func (d *Daemon) addEvent(n podview.Note) {
	if n.Type == "Warning" {
		d.log.Warn(n.Message, "pod", n.Key, "reason", n.Reason)
	} else {
		d.log.Info(n.Message, "pod", n.Key, "reason", n.Reason)
	}
	now := d.now()
	d.desired.QueueEvent(PodEvent{Pod: n.Key, Time: now, Type: n.Type, Reason: n.Reason, Message: n.Message})
	d.view.Record(n, now)
}

// hostIP is the first non-loopback IPv4 address, for status.hostIP.
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}
