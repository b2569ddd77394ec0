package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	fmt.Fprintf(c.out, "%s: %d deployment(s), %d daemonset(s), %d priorityclass(es), %d pod(s) applied; the hub schedules them\n",
		file, out.Deployments, out.DaemonSets, out.PriorityClasses, out.Pods)
	return nil
}

// workloadPath is the API's name of a kind as the CLI takes it.
func workloadPath(kind string) (string, error) {
	switch kind {
	case "deployments", "deployment", "deploy":
		return "deployments", nil
	case "daemonsets", "daemonset", "ds":
		return "daemonsets", nil
	case "priorityclasses", "priorityclass", "pc":
		return "priorityclasses", nil
	}
	return "", fmt.Errorf("unknown kind %q (pod, deployment, daemonset, priorityclass)", kind)
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
		fmt.Fprintln(w, "NAMESPACE\tNAME\tDESIRED\tCURRENT\tREADY\tAVAILABLE\tNODE SELECTOR\tAGE")
		for _, raw := range items {
			var d appsv1.DaemonSet
			json.Unmarshal(raw, &d)
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", d.Namespace, d.Name, d.Status.DesiredNumberScheduled,
				d.Status.CurrentNumberScheduled, d.Status.NumberReady, d.Status.NumberAvailable,
				labelList(d.Spec.Template.Spec.NodeSelector), age(now, d.CreationTimestamp))
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
	var obj struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Replicas *int32                `json:"replicas"`
			Selector *metav1.LabelSelector `json:"selector"`
			Template v1.PodTemplateSpec    `json:"template"`
		} `json:"spec"`
	}
	json.Unmarshal(d.Object, &obj)
	now := time.Now()
	w := tabwriter.NewWriter(c.out, 0, 8, 1, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s\n", obj.Metadata.Name)
	fmt.Fprintf(w, "Namespace:\t%s\n", orNone(obj.Metadata.Namespace))
	fmt.Fprintf(w, "CreationTimestamp:\t%s\n", obj.Metadata.CreationTimestamp.Format(time.RFC1123Z))
	fmt.Fprintf(w, "Labels:\t%s\n", labelList(obj.Metadata.Labels))
	if obj.Spec.Selector != nil {
		fmt.Fprintf(w, "Selector:\t%s\n", metav1.FormatLabelSelector(obj.Spec.Selector))
	}
	if path == "deployments" {
		fmt.Fprintf(w, "Replicas:\t%d desired\n", replicas(obj.Spec.Replicas))
	}
	t := obj.Spec.Template.Spec
	fmt.Fprintf(w, "Node-Selectors:\t%s\n", labelList(t.NodeSelector))
	fmt.Fprintf(w, "Priority Class:\t%s\n", orNone(t.PriorityClassName))
	for _, s := range t.TopologySpreadConstraints {
		fmt.Fprintf(w, "Topology Spread:\t%s:%s (maxSkew %d)\n", s.TopologyKey, s.WhenUnsatisfiable, s.MaxSkew)
	}
	w.Flush()
	if len(d.Events) == 0 {
		fmt.Fprintln(c.out, "Events:  <none>")
		return nil
	}
	fmt.Fprintln(c.out, "Events:")
	w = tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "  Type\tReason\tAge\tFrom\tMessage")
	fmt.Fprintln(w, "  ----\t------\t----\t----\t-------")
	for _, e := range d.Events {
		a := ago(now, e.Last)
		if e.Count > 1 {
			a = fmt.Sprintf("%s (x%d over %s)", a, e.Count, ago(now, e.First))
		}
		from := map[string]string{"Pod": "default-scheduler", "DaemonSet": "daemonset-controller", "Deployment": "deployment-controller"}[e.Kind]
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
