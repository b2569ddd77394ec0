package simfleet

import "github.com/podvisor/podvisor/sync/uplink"

// UplinkConfig is the device's agent configuration on the brokers urls,
// the nodes of one cluster it moves between (none: the enrolment's
// broker), for a caller that sets more of it (backoff, heartbeat)
// before uplink.New.
func (d Device) UplinkConfig(urls ...string) uplink.Config {
	if len(urls) == 0 {
		urls = []string{d.e.broker}
	}
	return uplink.Config{Broker: urls[0], Brokers: urls[1:], DeviceID: d.ID, HubKey: d.e.hubKey, TLS: d.tc}
}
