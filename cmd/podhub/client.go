package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
)

func (c *cli) client() *api.Client { return api.NewClient(c.path("podhub.sock")) }

// apply sends a manifest file's pods to a device or to the devices a
// selector matches. The file is checked here as a device checks it.
func (c *cli) apply(args []string) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	file := fs.String("f", "", "manifest file (YAML or JSON, one or more pods)")
	device := fs.String("device", "", "the device")
	selector := fs.String("selector", "", "every device with these labels: k=v[,k=v]")
	if _, err := flags(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return errors.New("apply: -f FILE is required")
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	if *device == "" && *selector == "" {
		return c.applyObjects(*file, data)
	}
	pods, err := manifest.Decode(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	req := api.ApplyRequest{Device: *device}
	if *selector != "" {
		if req.Selector, err = parseLabels(strings.Split(*selector, ","), false); err != nil {
			return err
		}
	}
	for _, p := range pods {
		raw, _ := json.Marshal(p)
		req.Pods = append(req.Pods, raw)
	}
	var applied []api.Applied
	if err := c.client().Do("POST", "/v1/apply", req, &applied); err != nil {
		return err
	}
	for _, a := range applied {
		fmt.Fprintf(c.out, "device/%s: %d pod(s) applied, generation %d\n", a.Device, len(pods), a.Generation)
	}
	return nil
}

func (c *cli) delete(args []string) error {
	fs := flag.NewFlagSet("delete", flag.ContinueOnError)
	device := fs.String("device", "", "the device")
	ns := fs.String("n", "default", "namespace")
	relName := fs.String("name", "podvisor", "release: the release's name (a firmware bundle's)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 2 && pos[0] == "release" {
		if err := c.client().Do("DELETE", "/v1/releases/"+url.PathEscape(*relName)+"/"+url.PathEscape(pos[1]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "release %s %s deleted\n", *relName, pos[1])
		return nil
	}
	if len(pos) == 2 && objectPath(pos[0]) != "" {
		return c.deleteObject(pos[0], pos[1], *ns)
	}
	if len(pos) == 2 && pos[0] != "pod" {
		return c.deleteWorkload(pos[0], pos[1], *ns)
	}
	if len(pos) == 2 && *device == "" {
		if err := c.client().Do("DELETE", "/v1/pods/"+url.PathEscape(*ns)+"/"+url.PathEscape(pos[1]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "pod %s/%s deleted; it terminates on its device\n", *ns, pos[1])
		return nil
	}
	if len(pos) != 2 || pos[0] != "pod" || *device == "" {
		return errors.New("usage: podhub delete pod NAME --device ID [-n NAMESPACE] | delete deployment|daemonset|statefulset|priorityclass NAME [-n NAMESPACE]")
	}
	var a api.Applied
	path := "/v1/devices/" + url.PathEscape(*device) + "/pods/" + url.PathEscape(*ns) + "/" + url.PathEscape(pos[1])
	if err := c.client().Do("DELETE", path, nil, &a); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "pod %s/%s deleted from device/%s, generation %d\n", *ns, pos[1], a.Device, a.Generation)
	return nil
}

func (c *cli) get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	output := fs.String("o", "", "json, yaml or wide")
	all := fs.Bool("A", false, "the pods of every device; the configmaps or secrets of every namespace")
	device := fs.String("device", "", "the pods of one device")
	ns := fs.String("n", "default", "namespace (configmaps, secrets)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) >= 1 && len(pos) <= 2 && objectPath(pos[0]) != "" {
		name := ""
		if len(pos) == 2 {
			name = pos[1]
		}
		return c.getObjects(pos[0], name, *ns, *all && name == "", *output, time.Now())
	}
	if len(pos) != 1 {
		return errors.New("usage: podhub get devices | pods (-A | --device ID)")
	}
	now := time.Now()
	switch pos[0] {
	case "devices", "device":
		var ds []fleetdb.Device
		if err := c.client().Do("GET", "/v1/devices", nil, &ds); err != nil {
			return err
		}
		if *output != "" {
			return printObject(c, ds, *output)
		}
		w := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
		fmt.Fprintln(w, "NAME\tSTATUS\tPODS\tVERSION\tUPDATE\tLAST-SEEN\tLABELS")
		for _, d := range ds {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", d.ID, readiness(d), d.Pods, orNone(d.Version), updateColumn(d.Update), ago(now, d.LastSeen), labelList(d.Labels))
		}
		return w.Flush()
	case "pods", "pod":
		if *all == (*device != "") {
			return errors.New("get pods: give -A or --device ID")
		}
		var list v1.PodList
		if err := c.client().Do("GET", "/v1/pods?device="+url.QueryEscape(*device), nil, &list); err != nil {
			return err
		}
		if *output == "wide" {
			return c.podsWide(list, now)
		}
		if *output != "" {
			return printObject(c, list, *output)
		}
		w := tabwriter.NewWriter(c.out, 0, 8, 3, ' ', 0)
		fmt.Fprintln(w, "DEVICE\tNAMESPACE\tNAME\tREADY\tSTATUS\tRESTARTS\tAGE")
		for i := range list.Items {
			p := &list.Items[i]
			r := podRow(p, now)
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orNone(p.Annotations[fleetdb.AnnotationDevice]), p.Namespace, p.Name, r.Ready, r.Status, r.Restarts, r.Age)
		}
		return w.Flush()
	case "deployments", "deployment", "deploy", "daemonsets", "daemonset", "ds", "statefulsets", "statefulset", "sts",
		"priorityclasses", "priorityclass", "pc", "poddisruptionbudgets", "poddisruptionbudget", "pdb":
		return c.getWorkloads(pos[0], *output, now)
	case "releases", "release":
		return c.getReleases(*output, now)
	case "updates", "update":
		return c.getUpdates(*output, now)
	case "replicas", "replica":
		return c.getReplicas(*output)
	}
	return fmt.Errorf("get: unknown resource %q (devices, pods, deployments, daemonsets, statefulsets, priorityclasses, pdb, configmaps, secrets, releases, updates, replicas)", pos[0])
}

func (c *cli) describe(args []string) error {
	fs := flag.NewFlagSet("describe", flag.ContinueOnError)
	ns := fs.String("n", "default", "namespace (deployment, daemonset, statefulset, configmap, secret)")
	relName := fs.String("name", "podvisor", "release: the release's name (a firmware bundle's)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 2 && pos[0] == "release" {
		return c.describeRelease(*relName, pos[1])
	}
	if len(pos) == 2 && pos[0] == "update" {
		return c.describeUpdate(pos[1], time.Now())
	}
	if len(pos) == 2 && objectPath(pos[0]) != "" {
		return c.describeObject(pos[0], pos[1], *ns)
	}
	if len(pos) == 2 && pos[0] != "device" {
		return c.describeWorkload(pos[0], pos[1], *ns)
	}
	if len(pos) != 2 || pos[0] != "device" {
		return errors.New("usage: podhub describe device ID | describe deployment|daemonset|statefulset NAME [-n NAMESPACE]")
	}
	var d api.DeviceDetail
	if err := c.client().Do("GET", "/v1/devices/"+url.PathEscape(pos[1]), nil, &d); err != nil {
		return err
	}
	now := time.Now()
	w := tabwriter.NewWriter(c.out, 0, 8, 1, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s\n", d.ID)
	fmt.Fprintf(w, "Status:\t%s (%s)\n", readiness(d.Device), map[bool]string{true: "connected", false: "disconnected"}[d.Online])
	fmt.Fprintf(w, "Last seen:\t%s ago\n", ago(now, d.LastSeen))
	fmt.Fprintf(w, "Version:\t%s\n", orNone(d.Version))
	if u := d.Update; u != nil {
		line := fmt.Sprintf("order %d (%s %s): %s", u.Order, u.Kind, u.Version, updateColumn(u))
		if u.Previous != "" {
			line += " (previous " + u.Previous + ")"
		}
		fmt.Fprintf(w, "Update:\t%s, %s ago\n", line, ago(now, u.Time))
	}
	fmt.Fprintf(w, "Labels:\t%s\n", labelList(d.Labels))
	fmt.Fprintf(w, "Desired:\tgeneration %d, %d pod(s)\n", d.Generation, len(d.Desired))
	fmt.Fprintf(w, "Observed:\tgeneration %d\n", d.ObservedGeneration)
	if d.FencedAt != nil {
		fmt.Fprintf(w, "Fenced:\t%s ago (podhub fence device %s --remove lifts it once the device has applied it)\n", ago(now, *d.FencedAt), d.ID)
	}
	describeObjects(w, d.Objects, now)
	if d.Node != nil {
		for _, res := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods} {
			cap, alloc := d.Node.Capacity[res], d.Node.Allocatable[res]
			fmt.Fprintf(w, "%s:\tcapacity %s, allocatable %s\n", res, cap.String(), alloc.String())
		}
		for _, cond := range d.Node.Conditions {
			fmt.Fprintf(w, "Condition %s:\t%s (%s)\n", cond.Type, cond.Status, cond.Reason)
		}
	}
	if n := d.Net; n != nil { // validated by the hub: bounded, keys are pod names
		fmt.Fprintf(w, "Network:\t%d pod(s) counted, in %dMi, out %dMi\n", n.Counted, n.Total.RxBytes>>20, n.Total.TxBytes>>20)
		for _, p := range n.Pods {
			fmt.Fprintf(w, "Network %s:\tin %dMi, out %dMi (%s)\n", p.Key, p.RxBytes>>20, p.TxBytes>>20, p.Source)
		}
	}
	if d.Ack != nil {
		if d.Ack.Error != "" {
			fmt.Fprintf(w, "Last answer:\tgeneration %d refused: %s\n", d.Ack.Generation, d.Ack.Error)
		}
		for _, r := range d.Ack.Pods {
			verdict := "accepted"
			if !r.Accepted {
				verdict = "rejected: " + r.Reason
			}
			fmt.Fprintf(w, "Pod %s/%s:\t%s\n", r.Namespace, r.Name, verdict)
		}
	}
	w.Flush()
	describeEvents(c.out, d.Events, now)
	return nil
}

// describeObjects prints a device's sealing key (its fingerprint) and
// object index: names and versions, never data.
func describeObjects(w io.Writer, o *fleetdb.DeviceObjects, now time.Time) {
	if o == nil {
		fmt.Fprintf(w, "Sealing key:\t<none> (the device has not announced one; it gets no objects)\n")
		return
	}
	if o.SealKeyFingerprint != "" {
		fmt.Fprintf(w, "Sealing key:\t%s (%s %s ago, pinned)\n", o.SealKeyFingerprint, o.SealKeySource, ago(now, o.SealKeyAt))
	} else {
		fmt.Fprintf(w, "Sealing key:\t<none> (the device has not announced one; it gets no objects)\n")
	}
	if !o.RevokedAt.IsZero() {
		fmt.Fprintf(w, "Revoked:\t%s ago: its messages are ignored and it gets no objects (podhub device add enrols it again)\n", ago(now, o.RevokedAt))
	}
	if o.RefusedKey != "" {
		fmt.Fprintf(w, "Sealing key refused:\t%s, announced %s ago: not the pinned key (enrol the device again to change it)\n", o.RefusedKey, ago(now, o.RefusedAt))
	}
	fmt.Fprintf(w, "Objects:\tgeneration %d, %d object(s)\n", o.Generation, len(o.Entries))
	for _, e := range o.Entries {
		fmt.Fprintf(w, "Object %s %s/%s:\tuid %s, resourceVersion %s\n", e.Kind, e.Namespace, e.Name, e.UID, e.ResourceVersion)
	}
	for _, reason := range o.Omitted {
		fmt.Fprintf(w, "Object left out:\t%s\n", reason)
	}
}

// describeEvents prints a device's last 20 events as kubectl describe
// does, each naming its pod (namespace/name; <none> for the hub's own).
func describeEvents(out io.Writer, events []fleetdb.DeviceEvent, now time.Time) {
	if len(events) == 0 {
		fmt.Fprintln(out, "Events:  <none>")
		return
	}
	if len(events) > 20 {
		events = events[len(events)-20:]
	}
	fmt.Fprintln(out, "Events:")
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "  Type\tReason\tAge\tPod\tMessage")
	fmt.Fprintln(w, "  ----\t------\t----\t---\t-------")
	for _, e := range events {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", e.Type, e.Reason, ago(now, e.Time), orNone(e.Pod), e.Message)
	}
	w.Flush()
}

func (c *cli) label(args []string) error {
	fs := flag.NewFlagSet("label", flag.ContinueOnError)
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 3 || pos[0] != "device" {
		return errors.New("usage: podhub label device ID k=v|k- [k=v|k- ...]")
	}
	labels, err := parseLabels(pos[2:], true)
	if err != nil {
		return err
	}
	if err := c.client().Do("PUT", "/v1/devices/"+url.PathEscape(pos[1])+"/labels", labels, nil); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "device/%s labeled\n", pos[1])
	return nil
}

// parseLabels reads k=v (and, when removal is allowed, k- to remove).
func parseLabels(items []string, removal bool) (map[string]string, error) {
	out := map[string]string{}
	for _, it := range items {
		if k, ok := strings.CutSuffix(it, "-"); ok && removal && !strings.Contains(it, "=") {
			out[k] = ""
			continue
		}
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q: want key=value", it)
		}
		out[k] = v
	}
	return out, nil
}

func readiness(d fleetdb.Device) string {
	s := "NotReady"
	switch {
	case d.DuplicateID:
		s = "DuplicateID"
	case d.Ready:
		s = "Ready"
	}
	if d.FencedAt != nil {
		s += ",Fenced" // as kubectl adds SchedulingDisabled to a cordoned node's status
	}
	return s
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "<never>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func labelList(l map[string]string) string {
	if len(l) == 0 {
		return "<none>"
	}
	var parts []string
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func printObject(c *cli, v any, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "    ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = c.out.Write(b)
		return err
	}
	return fmt.Errorf("-o %s: want json or yaml", format)
}
