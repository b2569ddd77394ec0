package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// rollout is kubectl rollout: status, pause, resume, undo, history and
// restart of a deployment, daemonset or statefulset (which kubectl
// neither pauses nor resumes).
func (c *cli) rollout(args []string) error {
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	ns := fs.String("n", "default", "namespace")
	toRevision := fs.Int64("to-revision", 0, "undo: the revision to roll back to (0: the one before the newest)")
	revision := fs.Int64("revision", 0, "history: show this revision's pod template")
	watch := fs.Bool("watch", true, "status: wait until the rollout finishes")
	timeout := fs.Duration("timeout", 0, "status: how long to wait (0: for ever)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errors.New("usage: podhub rollout status|pause|resume|undo|history|restart KIND/NAME [-n NAMESPACE]")
	}
	verb := pos[0]
	kind, name, ok := strings.Cut(pos[1], "/")
	if !ok || name == "" {
		return fmt.Errorf("rollout %s: want KIND/NAME (deployment/web, daemonset/agent, statefulset/db), got %q", verb, pos[1])
	}
	path, err := workloadPath(kind)
	refs := map[string]string{"deployments": "deployment.apps/", "daemonsets": "daemonset.apps/", "statefulsets": "statefulset.apps/"}
	if _, ok := refs[path]; err != nil || !ok {
		return fmt.Errorf("rollout: unknown kind %q (deployment, daemonset, statefulset)", kind)
	}
	base := workloadURL(path, *ns, name)
	ref := refs[path] + name
	switch verb {
	case "status":
		return c.rolloutStatus(path, base, *watch, *timeout)
	case "history":
		return c.rolloutHistory(base, ref, *revision)
	case "pause", "resume", "undo", "restart":
		var out api.RolloutDone
		if err := c.client().Do("POST", base+"/rollout/"+verb, api.RolloutRequest{ToRevision: *toRevision}, &out); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "%s %s\n", ref, out.Done)
		return nil
	}
	return fmt.Errorf("rollout: unknown verb %q (status, pause, resume, undo, history, restart)", verb)
}

// rolloutStatus prints the rollout's state each time it changes until it
// finishes, fails (progress deadline, halt) or the timeout passes.
func (c *cli) rolloutStatus(path, base string, watch bool, timeout time.Duration) error {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	last := ""
	for {
		var d workloaddb.WorkloadDetail
		if err := c.client().Do("GET", base, nil, &d); err != nil {
			return err
		}
		msg, done, err := rolloutState(path, d.Object)
		if err != nil {
			return err
		}
		if msg != last {
			fmt.Fprint(c.out, msg)
			last = msg
		}
		if done || !watch {
			return nil
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return errors.New("timed out waiting for the condition")
		}
		time.Sleep(time.Second)
	}
}

// rolloutState is kubectl's status viewer over a stored workload, with
// the hub's halt as a failure and its skipped devices said.
func rolloutState(path string, raw json.RawMessage) (string, bool, error) {
	switch path {
	case "daemonsets":
		var ds appsv1.DaemonSet
		if err := json.Unmarshal(raw, &ds); err != nil {
			return "", false, err
		}
		return daemonSetState(&ds)
	case "statefulsets":
		var s appsv1.StatefulSet
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, err
		}
		return statefulSetState(&s)
	}
	var d appsv1.Deployment
	if err := json.Unmarshal(raw, &d); err != nil {
		return "", false, err
	}
	return deploymentState(&d)
}

// deploymentState is kubectl's DeploymentStatusViewer.
func deploymentState(d *appsv1.Deployment) (string, bool, error) {
	st := d.Status
	if d.Generation > st.ObservedGeneration {
		return "Waiting for deployment spec update to be observed...\n", false, nil
	}
	for _, c := range st.Conditions {
		if c.Type != appsv1.DeploymentProgressing {
			continue
		}
		switch c.Reason {
		case workloads.ReasonTimedOut:
			return "", false, fmt.Errorf("deployment %q exceeded its progress deadline", d.Name)
		case workloads.ReasonRolloutHalted:
			return "", false, fmt.Errorf("deployment %q: %s", d.Name, c.Message)
		}
	}
	want := replicas(d.Spec.Replicas)
	switch {
	case st.UpdatedReplicas < want:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d out of %d new replicas have been updated...\n", d.Name, st.UpdatedReplicas, want), false, nil
	case st.Replicas > st.UpdatedReplicas:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d old replicas are pending termination...\n", d.Name, st.Replicas-st.UpdatedReplicas), false, nil
	case st.AvailableReplicas < st.UpdatedReplicas:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d of %d updated replicas are available...\n", d.Name, st.AvailableReplicas, st.UpdatedReplicas), false, nil
	}
	return fmt.Sprintf("deployment %q successfully rolled out\n", d.Name), true, nil
}

// daemonSetState is kubectl's DaemonSetStatusViewer; devices skipped
// for being unreachable are said after the verdict.
func daemonSetState(ds *appsv1.DaemonSet) (string, bool, error) {
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return "", true, fmt.Errorf("rollout status is only available for %s strategy type", appsv1.RollingUpdateStatefulSetStrategyType)
	}
	st := ds.Status
	if ds.Generation > st.ObservedGeneration {
		return "Waiting for daemon set spec update to be observed...\n", false, nil
	}
	skipped := ""
	for _, c := range st.Conditions {
		switch c.Type {
		case workloads.ConditionRolloutHalted:
			return "", false, fmt.Errorf("daemon set %q: %s", ds.Name, c.Message)
		case workloads.ConditionDevicesSkipped:
			skipped = c.Message + "\n"
		}
	}
	switch {
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d out of %d new pods have been updated...\n", ds.Name, st.UpdatedNumberScheduled, st.DesiredNumberScheduled) + skipped, false, nil
	case st.NumberAvailable < st.DesiredNumberScheduled:
		return fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d of %d updated pods are available...\n", ds.Name, st.NumberAvailable, st.DesiredNumberScheduled) + skipped, false, nil
	}
	return fmt.Sprintf("daemon set %q successfully rolled out\n", ds.Name) + skipped, true, nil
}

// statefulSetState is kubectl's StatefulSetStatusViewer, with the hub's
// halt as a failure. As in kubectl, a RollingUpdate with rollingUpdate
// set (apply always sets it, with partition 0) reports the partitioned
// roll out; the revision messages are for one without.
func statefulSetState(s *appsv1.StatefulSet) (string, bool, error) {
	if s.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		return "", true, fmt.Errorf("rollout status is only available for %s strategy type", appsv1.RollingUpdateStatefulSetStrategyType)
	}
	st := s.Status
	if st.ObservedGeneration == 0 || s.Generation > st.ObservedGeneration {
		return "Waiting for statefulset spec update to be observed...\n", false, nil
	}
	for _, c := range st.Conditions {
		if c.Type == workloads.StatefulSetRolloutHalted {
			return "", false, fmt.Errorf("statefulset %q: %s", s.Name, c.Message)
		}
	}
	if s.Spec.Replicas != nil && st.ReadyReplicas < *s.Spec.Replicas {
		return fmt.Sprintf("Waiting for %d pods to be ready...\n", *s.Spec.Replicas-st.ReadyReplicas), false, nil
	}
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		if s.Spec.Replicas != nil && ru.Partition != nil && st.UpdatedReplicas < *s.Spec.Replicas-*ru.Partition {
			return fmt.Sprintf("Waiting for partitioned roll out to finish: %d out of %d new pods have been updated...\n",
				st.UpdatedReplicas, *s.Spec.Replicas-*ru.Partition), false, nil
		}
		return fmt.Sprintf("partitioned roll out complete: %d new pods have been updated...\n", st.UpdatedReplicas), true, nil
	}
	if st.UpdateRevision != st.CurrentRevision {
		return fmt.Sprintf("waiting for statefulset rolling update to complete %d pods at revision %s...\n",
			st.UpdatedReplicas, st.UpdateRevision), false, nil
	}
	return fmt.Sprintf("statefulset rolling update complete %d pods at revision %s...\n", st.CurrentReplicas, st.CurrentRevision), true, nil
}

// rolloutHistory prints the revisions (REVISION CHANGE-CAUSE), or one
// revision's pod template.
func (c *cli) rolloutHistory(base, ref string, revision int64) error {
	var revs []workloaddb.Revision
	if err := c.client().Do("GET", base+"/revisions", nil, &revs); err != nil {
		return err
	}
	if revision > 0 {
		for _, r := range revs {
			if r.Number != revision {
				continue
			}
			fmt.Fprintf(c.out, "%s with revision #%d\nPod Template:\n", ref, revision)
			if r.Template == nil {
				fmt.Fprintln(c.out, "  <unknown: made before the hub kept templates>")
				return nil
			}
			var t v1.PodTemplateSpec
			json.Unmarshal(r.Template, &t)
			b, _ := yaml.Marshal(t)
			for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
				fmt.Fprintln(c.out, "  "+line)
			}
			return nil
		}
		return fmt.Errorf("unable to find the specified revision")
	}
	fmt.Fprintln(c.out, ref)
	w := tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "REVISION\tCHANGE-CAUSE")
	for _, r := range revs {
		fmt.Fprintf(w, "%d\t%s\n", r.Number, orNone(r.ChangeCause))
	}
	w.Flush()
	fmt.Fprintln(c.out)
	return nil
}
