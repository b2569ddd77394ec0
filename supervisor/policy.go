package supervisor

import "github.com/podvisor/podvisor/supervisor/desired"

// Policy is what the device owner allows pods, whatever their source
// (Config.Policy); desired.Pods holds pods to it.
type Policy = desired.Policy
