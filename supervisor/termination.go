package supervisor

import (
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/retention"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/crilog"
)

// withTerminationMessage sets a finished container's message as the
// kubelet does: its termination message file, or under
// FallbackToLogsOnError the tail of its log (crilog.TerminationMessage).
func withTerminationMessage(logs *retention.Keeper, rt runtime.Runtime, in *lifecycle.Instance, name string, attempt int, x *runtime.Exit) {
	if in == nil {
		return
	}
	spec := in.Spec(name)
	if spec == nil {
		return
	}
	file := ""
	if spec.TerminationMessagePath != "" {
		file = rt.TerminationFile(x.InstanceID)
	}
	x.Message = crilog.TerminationMessage(spec.TerminationMessagePolicy, file,
		logs.LogPath(in.Pod, name, attempt), x.ExitCode, x.Reason, x.Message)
}
