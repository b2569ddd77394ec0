package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/runtime/crilog"
)

// LogRequest is a pod's log as the hub asks for it (kubectl logs' options).
type LogRequest struct {
	Container        string
	Previous, Follow bool
	crilog.Options
}

// LogError is a log refused, in the kubelet's and the API server's words,
// with the HTTP status code they answer with.
type LogError struct {
	Code    int
	Message string
}

func (e *LogError) Error() string { return e.Message }

// OpenLog locates a pod's log on b as the API server and the kubelet do:
// the pod, then the container (the only one when none is named), then the
// instance (the running one, or the previous with Previous). The function
// returned writes it to w as req says, following it while that instance
// runs with Follow, until ctx ends.
func OpenLog(b Backend, namespace, name string, req LogRequest) (func(ctx context.Context, w io.Writer) error, error) {
	var pod *v1.Pod
	pods, _, _ := b.Pods()
	for _, p := range pods {
		if p.Namespace == namespace && p.Name == name {
			pod = p
			break
		}
	}
	if pod == nil {
		return nil, &LogError{http.StatusNotFound, fmt.Sprintf("pods %q not found", name)}
	}
	container := req.Container
	if container == "" {
		if len(pod.Spec.Containers) != 1 {
			return nil, &LogError{http.StatusBadRequest, fmt.Sprintf("a container name must be specified for pod %s, choose one of: %s", name, containerNames(pod))}
		}
		container = pod.Spec.Containers[0].Name
	}
	if !hasContainer(pod, container) {
		return nil, &LogError{http.StatusBadRequest, fmt.Sprintf("container %s is not valid for pod %s", container, name)}
	}
	ref, err := b.Log(namespace, name, container, req.Previous)
	if err != nil {
		msg := err.Error()
		if !req.Previous {
			msg = fmt.Sprintf("container %q in pod %q is waiting to start: %s", container, name, waitingReason(pod, container))
		}
		return nil, &LogError{http.StatusBadRequest, msg}
	}
	if ref.Reader == nil {
		return nil, &LogError{http.StatusInternalServerError, fmt.Sprintf("no runtime on this device reads the log of container %q", container)}
	}
	return func(ctx context.Context, w io.Writer) error {
		if !req.Follow || !ref.Running {
			return crilog.CopyOptions(w, ref.Path, req.Options)
		}
		return crilog.FollowOptions(ctx, w, ref.Path, instanceEnded(ctx, b, namespace, name, container, ref.InstanceID), req.Options)
	}, nil
}

// containerNames lists a pod's containers as the API server does: [a b].
func containerNames(p *v1.Pod) string {
	var names []string
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
	}
	return "[" + strings.Join(names, " ") + "]"
}

func hasContainer(p *v1.Pod, name string) bool {
	for _, cs := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// waitingReason is why a container has not started, as its status says.
func waitingReason(p *v1.Pod, container string) string {
	for _, cs := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if cs.Name == container && cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			return cs.State.Waiting.Reason
		}
	}
	return "ContainerCreating"
}
