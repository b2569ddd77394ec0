package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/podrow"
	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
)

// applyObjects sends a file of Deployments, DaemonSets, PriorityClasses
// and pods to the hub's scheduler; the hub decodes it strictly, all or
// nothing.
func (c *cli) applyObjects(file string, data []byte) error {
	if len(data) > manifest.MaxFileSize {
		return fmt.Errorf("%s: file is %d bytes, larger than the %d byte limit", file, len(data), manifest.MaxFileSize)
	}
	var out api.ObjectsApplied
	if err := c.client().Do("POST", "/v1/objects", api.ObjectsRequest{File: file, Data: data}, &out); err != nil {
		return err
	}
	if out.Deployments+out.DaemonSets+out.StatefulSets+out.PriorityClasses+out.Pods > 0 || out.ConfigMaps+out.Secrets+out.PDBs == 0 {
		fmt.Fprintf(c.out, "%s: %d deployment(s), %d daemonset(s), %d statefulset(s), %d priorityclass(es), %d pod(s) applied; the hub schedules them\n",
			file, out.Deployments, out.DaemonSets, out.StatefulSets, out.PriorityClasses, out.Pods)
	}
	if out.ConfigMaps+out.Secrets > 0 {
		fmt.Fprintf(c.out, "%s: %d configmap(s), %d secret(s) applied\n", file, out.ConfigMaps, out.Secrets)
	}
	if out.PDBs > 0 {
		fmt.Fprintf(c.out, "%s: %d poddisruptionbudget(s) applied\n", file, out.PDBs)
	}
	return nil
}

// workloadPath is the API's name of a kind as the CLI takes it.
func workloadPath(kind string) (string, error) {
	switch kind {
	case "deployments", "deployment", "deploy":
		return "deployments", nil
	case "daemonsets", "daemonset", "ds":
		return "daemonsets", nil
	case "statefulsets", "statefulset", "sts":
		return "statefulsets", nil
	case "priorityclasses", "priorityclass", "pc":
		return "priorityclasses", nil
	case "poddisruptionbudgets", "poddisruptionbudget", "pdb":
		return "poddisruptionbudgets", nil
	}
	return "", fmt.Errorf("unknown kind %q (pod, deployment, daemonset, statefulset, priorityclass, pdb)", kind)
}

// workloadURL is the API's URL of one workload of the kind path (a
// PriorityClass has no namespace: "-").
func workloadURL(path, ns, name string) string {
	if path == "priorityclasses" {
		ns = "-"
	}
	return "/v1/workloads/" + path + "/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
}

func (c *cli) deleteWorkload(kind, name, ns string) error {
	path, err := workloadPath(kind)
	if err != nil {
		return err
	}
	if err := c.client().Do("DELETE", workloadURL(path, ns, name), nil, nil); err != nil {
		return err
	}
	fmt.Fprintln(c.out, deletedMessage(path, name))
	return nil
}

// deletedMessage is kubectl's line for a deleted object, and what
// becomes of a workload's pods.
func deletedMessage(path, name string) string {
	switch path {
	case "priorityclasses":
		return fmt.Sprintf("priorityclass.scheduling.k8s.io %q deleted", name)
	case "daemonsets":
		return fmt.Sprintf("daemonset.apps %q deleted; its pods terminate on their devices", name)
	case "statefulsets":
		return fmt.Sprintf("statefulset.apps %q deleted; its pods terminate on their devices", name)
	case "poddisruptionbudgets":
		return fmt.Sprintf("poddisruptionbudget.policy %q deleted", name)
	}
	return fmt.Sprintf("deployment.apps %q deleted; its pods terminate on their devices", name)
}

func (c *cli) getWorkloads(kind, output string, now time.Time) error {
	path, err := workloadPath(kind)
	if err != nil {
		return err
	}
	var items []json.RawMessage
	if err := c.client().Do("GET", "/v1/workloads/"+path, nil, &items); err != nil {
		return err
	}
	if output != "" {
		return printObject(c, items, output)
	}
	w := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
	switch path {
	case "deployments":
		fmt.Fprintln(w, "NAMESPACE\tNAME\tREADY\tUP-TO-DATE\tAVAILABLE\tAGE")
		for _, raw := range items {
			var d appsv1.Deployment
			json.Unmarshal(raw, &d)
			fmt.Fprintf(w, "%s\t%s\t%d/%d\t%d\t%d\t%s\n", d.Namespace, d.Name, d.Status.ReadyReplicas, replicas(d.Spec.Replicas),
				d.Status.UpdatedReplicas, d.Status.AvailableReplicas, age(now, d.CreationTimestamp))
		}
	case "daemonsets":
		fmt.Fprintln(w, "NAMESPACE\tNAME\tDESIRED\tCURRENT\tREADY\tUP-TO-DATE\tAVAILABLE\tNODE SELECTOR\tAGE")
		for _, raw := range items {
			var d appsv1.DaemonSet
			json.Unmarshal(raw, &d)
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", d.Namespace, d.Name, d.Status.DesiredNumberScheduled,
				d.Status.CurrentNumberScheduled, d.Status.NumberReady, d.Status.UpdatedNumberScheduled, d.Status.NumberAvailable,
				labelList(d.Spec.Template.Spec.NodeSelector), age(now, d.CreationTimestamp))
		}
	case "statefulsets":
		fmt.Fprintln(w, "NAMESPACE\tNAME\tREADY\tAGE")
		for _, raw := range items {
			var s appsv1.StatefulSet
			json.Unmarshal(raw, &s)
			fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\n", s.Namespace, s.Name, s.Status.ReadyReplicas, replicas(s.Spec.Replicas),
				age(now, s.CreationTimestamp))
		}
	case "poddisruptionbudgets":
		fmt.Fprintln(w, "NAMESPACE\tNAME\tMIN AVAILABLE\tMAX UNAVAILABLE\tALLOWED DISRUPTIONS\tAGE")
		for _, raw := range items {
			var pdb policyv1.PodDisruptionBudget
			json.Unmarshal(raw, &pdb)
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", pdb.Namespace, pdb.Name, intOrNA(pdb.Spec.MinAvailable),
				intOrNA(pdb.Spec.MaxUnavailable), pdb.Status.DisruptionsAllowed, age(now, pdb.CreationTimestamp))
		}
	default:
		fmt.Fprintln(w, "NAME\tVALUE\tGLOBAL-DEFAULT\tAGE\tPREEMPTIONPOLICY")
		for _, raw := range items {
			var pc schedulingv1.PriorityClass
			json.Unmarshal(raw, &pc)
			policy := v1.PreemptLowerPriority
			if pc.PreemptionPolicy != nil {
				policy = *pc.PreemptionPolicy
			}
			fmt.Fprintf(w, "%s\t%d\t%t\t%s\t%s\n", pc.Name, pc.Value, pc.GlobalDefault, age(now, pc.CreationTimestamp), policy)
		}
	}
	return w.Flush()
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func age(now time.Time, t metav1.Time) string { return ago(now, t.Time) }

func (c *cli) describeWorkload(kind, name, ns string) error {
	path, err := workloadPath(kind)
	if err != nil {
		return err
	}
	var d workloaddb.WorkloadDetail
	if err := c.client().Do("GET", workloadURL(path, ns, name), nil, &d); err != nil {
		return err
	}
	if path == "poddisruptionbudgets" {
		return describePDB(c.out, d, time.Now())
	}
	var obj struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Replicas *int32                `json:"replicas"`
			Selector *metav1.LabelSelector `json:"selector"`
			Template v1.PodTemplateSpec    `json:"template"`
		} `json:"spec"`
	}
	json.Unmarshal(d.Object, &obj)
	var dep struct {
		Status appsv1.DeploymentStatus `json:"status"`
	}
	var daemon struct {
		Status appsv1.DaemonSetStatus `json:"status"`
	}
	json.Unmarshal(d.Object, &dep)
	json.Unmarshal(d.Object, &daemon)
	var conds [][4]string
	for _, c := range dep.Status.Conditions {
		conds = append(conds, [4]string{string(c.Type), string(c.Status), c.Reason, c.Message})
	}
	if path == "daemonsets" {
		conds = nil
		for _, c := range daemon.Status.Conditions {
			conds = append(conds, [4]string{string(c.Type), string(c.Status), c.Reason, c.Message})
		}
	}
	now := time.Now()
	w := tabwriter.NewWriter(c.out, 0, 8, 1, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s\n", obj.Metadata.Name)
	fmt.Fprintf(w, "Namespace:\t%s\n", orNone(obj.Metadata.Namespace))
	fmt.Fprintf(w, "CreationTimestamp:\t%s\n", obj.Metadata.CreationTimestamp.Format(time.RFC1123Z))
	fmt.Fprintf(w, "Labels:\t%s\n", labelList(obj.Metadata.Labels))
	if obj.Spec.Selector != nil {
		fmt.Fprintf(w, "Selector:\t%s\n", metav1.FormatLabelSelector(obj.Spec.Selector))
	}
	switch path {
	case "deployments":
		st := dep.Status
		fmt.Fprintf(w, "Replicas:\t%d desired | %d updated | %d total | %d available | %d unavailable\n", replicas(obj.Spec.Replicas),
			st.UpdatedReplicas, st.Replicas, st.AvailableReplicas, st.UnavailableReplicas)
	case "statefulsets":
		var sts appsv1.StatefulSet
		json.Unmarshal(d.Object, &sts)
		fmt.Fprintf(w, "Replicas:\t%d desired | %d total\n", replicas(obj.Spec.Replicas), sts.Status.Replicas)
		fmt.Fprintf(w, "Update Strategy:\t%s\n", sts.Spec.UpdateStrategy.Type)
		if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
			fmt.Fprintf(w, "  Partition:\t%d\n", *ru.Partition)
		}
	case "daemonsets":
		st := daemon.Status
		fmt.Fprintf(w, "Desired Number of Nodes Scheduled:\t%d\n", st.DesiredNumberScheduled)
		fmt.Fprintf(w, "Current Number of Nodes Scheduled:\t%d\n", st.CurrentNumberScheduled)
		fmt.Fprintf(w, "Number of Nodes Scheduled with Up-to-date Pods:\t%d\n", st.UpdatedNumberScheduled)
		fmt.Fprintf(w, "Number of Nodes Scheduled with Available Pods:\t%d\n", st.NumberAvailable)
		fmt.Fprintf(w, "Number of Nodes Misscheduled:\t%d\n", st.NumberMisscheduled)
	}
	t := obj.Spec.Template.Spec
	fmt.Fprintf(w, "Node-Selectors:\t%s\n", labelList(t.NodeSelector))
	fmt.Fprintf(w, "Priority Class:\t%s\n", orNone(t.PriorityClassName))
	for _, s := range t.TopologySpreadConstraints {
		fmt.Fprintf(w, "Topology Spread:\t%s:%s (maxSkew %d)\n", s.TopologyKey, s.WhenUnsatisfiable, s.MaxSkew)
	}
	w.Flush()
	if len(conds) > 0 {
		// Both kinds' conditions: Type, Status, Reason and, for a halt or
		// a skipped device, the message.
		fmt.Fprintln(c.out, "Conditions:")
		cw := tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
		fmt.Fprintln(cw, "  Type\tStatus\tReason\tMessage")
		fmt.Fprintln(cw, "  ----\t------\t------\t-------")
		for _, c := range conds {
			fmt.Fprintf(cw, "  %s\t%s\t%s\t%s\n", c[0], c[1], c[2], c[3])
		}
		cw.Flush()
	}
	return describeWorkloadEvents(c.out, d.Events, now)
}

// describeWorkloadEvents prints a workload's events as kubectl describe
// does, each from the controller that records it.
func describeWorkloadEvents(out io.Writer, events []workloaddb.SchedEvent, now time.Time) error {
	if len(events) == 0 {
		fmt.Fprintln(out, "Events:  <none>")
		return nil
	}
	fmt.Fprintln(out, "Events:")
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "  Type\tReason\tAge\tFrom\tMessage")
	fmt.Fprintln(w, "  ----\t------\t----\t----\t-------")
	for _, e := range events {
		a := ago(now, e.Last)
		if e.Count > 1 {
			a = fmt.Sprintf("%s (x%d over %s)", a, e.Count, ago(now, e.First))
		}
		from := map[string]string{"Pod": "default-scheduler", "DaemonSet": "daemonset-controller", "Deployment": "deployment-controller",
			"StatefulSet": "statefulset-controller", "PodDisruptionBudget": "controllermanager"}[e.Kind]
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", e.Type, e.Reason, a, orNone(from), e.Message)
	}
	return w.Flush()
}

// podRow is a pod's READY/STATUS/RESTARTS/AGE, Unknown for a silent
// device's pod, as kubectl shows them.
func podRow(p *v1.Pod, now time.Time) podrow.Row {
	r := podrow.Of(p, now)
	if p.Status.Phase == v1.PodUnknown && p.DeletionTimestamp == nil {
		r.Status = "Unknown"
	}
	return r
}

// podsWide is get pods -o wide: kubectl's columns with DEVICE for NODE.
func (c *cli) podsWide(list v1.PodList, now time.Time) error {
	w := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tNAME\tREADY\tSTATUS\tRESTARTS\tAGE\tIP\tDEVICE\tNOMINATED NODE")
	for i := range list.Items {
		p := &list.Items[i]
		r := podRow(p, now)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, r.Ready, r.Status, r.Restarts, r.Age,
			orNone(p.Status.PodIP), orNone(p.Spec.NodeName), orNone(p.Status.NominatedNodeName))
	}
	return w.Flush()
}

func (c *cli) cordon(verb string, args []string) error {
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || pos[0] != "device" {
		return fmt.Errorf("usage: podhub %s device ID", verb)
	}
	req := api.CordonRequest{Unschedulable: verb == "cordon"}
	if err := c.client().Do("PUT", "/v1/devices/"+url.PathEscape(pos[1])+"/cordon", req, nil); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "device/%s %sed\n", pos[1], verb)
	return nil
}

// fence declares a device dead: its pods are replaced elsewhere at once
// and it runs none (--remove lifts it once the device has applied it).
func (c *cli) fence(args []string) error {
	fs := flag.NewFlagSet("fence", flag.ContinueOnError)
	remove := fs.Bool("remove", false, "lift the fence (refused until the device has applied it and reports its fenced pods gone)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || pos[0] != "device" {
		return errors.New("usage: podhub fence device ID [--remove]")
	}
	var out api.Applied
	if err := c.client().Do("PUT", "/v1/devices/"+url.PathEscape(pos[1])+"/fence", api.FenceRequest{Remove: *remove}, &out); err != nil {
		return err
	}
	verb := "fenced"
	if *remove {
		verb = "unfenced"
	}
	fmt.Fprintf(c.out, "device/%s %s (generation %d)\n", pos[1], verb, out.Generation)
	return nil
}

// taint adds k=v:EFFECT (or k:EFFECT), or removes k:EFFECT- or every
// effect of k-, as kubectl taint does.
func (c *cli) taint(args []string) error {
	fs := flag.NewFlagSet("taint", flag.ContinueOnError)
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 3 || pos[0] != "device" {
		return errors.New("usage: podhub taint device ID k=v:EFFECT|k:EFFECT-|k- [...]")
	}
	var reqs []api.TaintRequest
	for _, spec := range pos[2:] {
		req, err := parseTaint(spec)
		if err != nil {
			return err
		}
		reqs = append(reqs, req)
	}
	for _, req := range reqs {
		if err := c.client().Do("PUT", "/v1/devices/"+url.PathEscape(pos[1])+"/taints", req, nil); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.out, "device/%s %s\n", pos[1], taintVerb(reqs))
	return nil
}

// taintVerb is what kubectl taint says it did: tainted, untainted, or
// modified when it did both.
func taintVerb(reqs []api.TaintRequest) string {
	removes := 0
	for _, r := range reqs {
		if r.Remove {
			removes++
		}
	}
	switch removes {
	case 0:
		return "tainted"
	case len(reqs):
		return "untainted"
	}
	return "modified"
}

func parseTaint(spec string) (api.TaintRequest, error) {
	var req api.TaintRequest
	spec, req.Remove = strings.CutSuffix(spec, "-")
	kv, effect, hasEffect := strings.Cut(spec, ":")
	if !hasEffect && !req.Remove {
		return req, fmt.Errorf("taint %q: want key=value:Effect (NoSchedule, PreferNoSchedule, NoExecute)", spec)
	}
	k, v, _ := strings.Cut(kv, "=")
	if k == "" {
		return req, fmt.Errorf("taint %q: empty key", spec)
	}
	req.Taint = v1.Taint{Key: k, Value: v, Effect: v1.TaintEffect(effect)}
	return req, nil
}

// intOrNA is an int-or-percent as kubectl's PDB columns show it.
func intOrNA(v *intstr.IntOrString) string {
	if v == nil {
		return "N/A"
	}
	return v.String()
}

// describePDB is kubectl describe pdb: the budget, its status and events.
func describePDB(out io.Writer, d workloaddb.WorkloadDetail, now time.Time) error {
	var pdb policyv1.PodDisruptionBudget
	if err := json.Unmarshal(d.Object, &pdb); err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 8, 1, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s\n", pdb.Name)
	fmt.Fprintf(w, "Namespace:\t%s\n", pdb.Namespace)
	if pdb.Spec.MinAvailable != nil {
		fmt.Fprintf(w, "Min available:\t%s\n", pdb.Spec.MinAvailable.String())
	}
	if pdb.Spec.MaxUnavailable != nil {
		fmt.Fprintf(w, "Max unavailable:\t%s\n", pdb.Spec.MaxUnavailable.String())
	}
	sel := "<unset>"
	if pdb.Spec.Selector != nil {
		sel = metav1.FormatLabelSelector(pdb.Spec.Selector)
	}
	fmt.Fprintf(w, "Selector:\t%s\n", sel)
	policy := string(policyv1.IfHealthyBudget)
	if p := pdb.Spec.UnhealthyPodEvictionPolicy; p != nil {
		policy = string(*p)
	}
	fmt.Fprintf(w, "Unhealthy Pod Eviction Policy:\t%s\n", policy)
	fmt.Fprintf(w, "Status:\t\n")
	fmt.Fprintf(w, "    Allowed disruptions:\t%d\n", pdb.Status.DisruptionsAllowed)
	fmt.Fprintf(w, "    Current:\t%d\n", pdb.Status.CurrentHealthy)
	fmt.Fprintf(w, "    Desired:\t%d\n", pdb.Status.DesiredHealthy)
	fmt.Fprintf(w, "    Total:\t%d\n", pdb.Status.ExpectedPods)
	for _, c := range pdb.Status.Conditions {
		fmt.Fprintf(w, "Condition %s:\t%s (%s) %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for name, t := range pdb.Status.DisruptedPods {
		fmt.Fprintf(w, "Disrupted pod %s:\tsince %s\n", name, ago(now, t.Time))
	}
	w.Flush()
	return describeWorkloadEvents(out, d.Events, now)
}
