package containerd

import (
	"errors"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/keyring"
	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// pullAuth is what a pull of a pod's image authenticates with: the logins
// of its imagePullSecrets that match the image, in the kubelet's order
// (pod/keyring), or the error a pull then fails with. The secrets it
// cannot read give the kubelet's warning, and the pull goes on without
// them.
func pullAuth(pod *v1.Pod, get objects.Getter, image string) (pluginapi.PullAuth, []runtime.Event) {
	if len(pod.Spec.ImagePullSecrets) == 0 {
		return pluginapi.PullAuth{}, nil
	}
	secrets, missing := keyring.PullSecrets(pod, get)
	var events []runtime.Event
	if len(missing) > 0 {
		events = append(events, runtime.Event{Type: v1.EventTypeWarning, Reason: keyring.MissingReason, Message: keyring.MissingMessage(missing)})
	}
	k, err := keyring.New(secrets)
	if err != nil {
		return pluginapi.PullAuth{Error: err.Error()}, events
	}
	var auth pluginapi.PullAuth
	for _, c := range k.Lookup(image) {
		auth.Credentials = append(auth.Credentials, pluginapi.Credential{Username: c.Username, Password: c.Password})
	}
	return auth, events
}

// pendingPullSecret is the first of a pod's imagePullSecrets that is
// still on its way from the hub (objects.ErrPending), or nil: its first
// pull waits for it rather than going without its login (the kubelet,
// reading the API server, would have it).
func pendingPullSecret(pod *v1.Pod, get objects.Getter) error {
	if get == nil {
		return nil
	}
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		if _, err := get.Get(objects.Ref{Kind: objects.Secret, Namespace: pod.Namespace, Name: ref.Name}); errors.Is(err, objects.ErrPending) {
			return err
		}
	}
	return nil
}

// withEvents has a start's report carry events.
func withEvents(done func(runtime.Started), events []runtime.Event) func(runtime.Started) {
	if len(events) == 0 {
		return done
	}
	return func(s runtime.Started) {
		s.Events = append(events, s.Events...)
		done(s)
	}
}
