package kubeapi

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/podvisor/podvisor/pod/podrow"
)

// Columns as the API server's table convertor declares them
// (k8s.io/kubernetes pkg/printers/internalversion/printers.go, v1.37).
// The server fills every cell, priority 1 included; kubectl hides
// priority 1 unless -o wide.
var (
	colName = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]}
	colAge  = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]}

	podColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Ready", Type: "string", Description: "The aggregate readiness state of this pod for accepting traffic."},
		{Name: "Status", Type: "string", Description: "The aggregate status of the containers in this pod."},
		{Name: "Restarts", Type: "string", Description: "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."},
		colAge,
		{Name: "IP", Type: "string", Priority: 1, Description: v1.PodStatus{}.SwaggerDoc()["podIP"]},
		{Name: "Node", Type: "string", Priority: 1, Description: v1.PodSpec{}.SwaggerDoc()["nodeName"]},
		{Name: "Nominated Node", Type: "string", Priority: 1, Description: v1.PodStatus{}.SwaggerDoc()["nominatedNodeName"]},
		{Name: "Readiness Gates", Type: "string", Priority: 1, Description: v1.PodSpec{}.SwaggerDoc()["readinessGates"]},
	}
	nodeColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Status", Type: "string", Description: "The status of the node"},
		{Name: "Roles", Type: "string", Description: "The roles of the node"},
		colAge,
		{Name: "Version", Type: "string", Description: v1.NodeSystemInfo{}.SwaggerDoc()["kubeletVersion"]},
		{Name: "Internal-IP", Type: "string", Priority: 1, Description: v1.NodeStatus{}.SwaggerDoc()["addresses"]},
		{Name: "External-IP", Type: "string", Priority: 1, Description: v1.NodeStatus{}.SwaggerDoc()["addresses"]},
		{Name: "OS-Image", Type: "string", Priority: 1, Description: v1.NodeSystemInfo{}.SwaggerDoc()["osImage"]},
		{Name: "Kernel-Version", Type: "string", Priority: 1, Description: v1.NodeSystemInfo{}.SwaggerDoc()["kernelVersion"]},
		{Name: "Container-Runtime", Type: "string", Priority: 1, Description: v1.NodeSystemInfo{}.SwaggerDoc()["containerRuntimeVersion"]},
	}
	eventColumns = []metav1.TableColumnDefinition{
		{Name: "Last Seen", Type: "string", Description: v1.Event{}.SwaggerDoc()["lastTimestamp"]},
		{Name: "Type", Type: "string", Description: v1.Event{}.SwaggerDoc()["type"]},
		{Name: "Reason", Type: "string", Description: v1.Event{}.SwaggerDoc()["reason"]},
		{Name: "Object", Type: "string", Description: v1.Event{}.SwaggerDoc()["involvedObject"]},
		{Name: "Subobject", Type: "string", Priority: 1, Description: v1.Event{}.InvolvedObject.SwaggerDoc()["fieldPath"]},
		{Name: "Source", Type: "string", Priority: 1, Description: v1.Event{}.SwaggerDoc()["source"]},
		{Name: "Message", Type: "string", Description: v1.Event{}.SwaggerDoc()["message"]},
		{Name: "First Seen", Type: "string", Priority: 1, Description: v1.Event{}.SwaggerDoc()["firstTimestamp"]},
		{Name: "Count", Type: "string", Priority: 1, Description: v1.Event{}.SwaggerDoc()["count"]},
		{Name: "Name", Type: "string", Priority: 1, Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	}
	namespaceColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Status", Type: "string", Description: "The status of the namespace"}, colAge}
	deploymentColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
		{Name: "Up-to-date", Type: "string", Description: appsv1.DeploymentStatus{}.SwaggerDoc()["updatedReplicas"]},
		{Name: "Available", Type: "string", Description: appsv1.DeploymentStatus{}.SwaggerDoc()["availableReplicas"]},
		colAge,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: appsv1.DeploymentSpec{}.SwaggerDoc()["selector"]},
	}
	daemonSetColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Desired", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["desiredNumberScheduled"]},
		{Name: "Current", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["currentNumberScheduled"]},
		{Name: "Ready", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["numberReady"]},
		{Name: "Up-to-date", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["updatedNumberScheduled"]},
		{Name: "Available", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["numberAvailable"]},
		{Name: "Node Selector", Type: "string", Description: v1.PodSpec{}.SwaggerDoc()["nodeSelector"]},
		colAge,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: appsv1.DaemonSetSpec{}.SwaggerDoc()["selector"]},
	}
	statefulSetColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
		colAge,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
	}
	priorityClassColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Value", Type: "integer", Description: schedulingv1.PriorityClass{}.SwaggerDoc()["value"]},
		{Name: "Global-Default", Type: "boolean", Description: schedulingv1.PriorityClass{}.SwaggerDoc()["globalDefault"]},
		colAge,
		{Name: "PreemptionPolicy", Type: "string", Description: schedulingv1.PriorityClass{}.SwaggerDoc()["preemptionPolicy"]},
	}
	leaseColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Holder", Type: "string", Description: coordinationv1.LeaseSpec{}.SwaggerDoc()["holderIdentity"]}, colAge}
	pdbColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Min Available", Type: "string", Description: "The minimum number of pods that must be available."},
		{Name: "Max Unavailable", Type: "string", Description: "The maximum number of pods that may be unavailable."},
		{Name: "Allowed Disruptions", Type: "integer", Description: "Calculated number of pods that may be disrupted at this time."},
		colAge,
	}
)

// columnsOf is a resource's column definitions.
func columnsOf(res *resource) []metav1.TableColumnDefinition {
	switch res {
	case resPods:
		return podColumns
	case resNodes:
		return nodeColumns
	case resEvents, resEventsV1:
		return eventColumns
	case resServices:
		return serviceColumns
	case resReplicaSets:
		return replicaSetColumns
	case resNamespaces:
		return namespaceColumns
	case resDeployments:
		return deploymentColumns
	case resDaemonSets:
		return daemonSetColumns
	case resStatefulSets:
		return statefulSetColumns
	case resPriorityClasses:
		return priorityClassColumns
	case resPDBs:
		return pdbColumns
	case resLeases:
		return leaseColumns
	}
	return []metav1.TableColumnDefinition{colName, colAge}
}

// cellsOf is one object's row, as the API server's print functions fill it.
func cellsOf(o kobject, now time.Time) []any {
	age := since(o.GetCreationTimestamp(), now)
	switch x := o.(type) {
	case *v1.Pod:
		row := podrow.Of(x, now)
		ip := "<none>"
		if x.Status.PodIP != "" {
			ip = x.Status.PodIP
		}
		return []any{x.Name, row.Ready, row.Status, row.Restarts, age, ip, orNone(x.Spec.NodeName),
			orNone(x.Status.NominatedNodeName), readinessGates(x)}
	case *v1.Node:
		return nodeCells(x, age)
	case *v1.Event:
		return eventCells(x, now)
	case *eventsv1.Event:
		return eventCells(coreEventOf(x), now)
	case *v1.Namespace:
		return []any{x.Name, string(x.Status.Phase), age}
	case *appsv1.Deployment:
		c, i := containersImages(x.Spec.Template.Spec.Containers)
		return []any{x.Name, fmt.Sprintf("%d/%d", x.Status.ReadyReplicas, replicas(x.Spec.Replicas)), int64(x.Status.UpdatedReplicas),
			int64(x.Status.AvailableReplicas), age, c, i, metav1.FormatLabelSelector(x.Spec.Selector)}
	case *appsv1.DaemonSet:
		c, i := containersImages(x.Spec.Template.Spec.Containers)
		return []any{x.Name, int64(x.Status.DesiredNumberScheduled), int64(x.Status.CurrentNumberScheduled), int64(x.Status.NumberReady),
			int64(x.Status.UpdatedNumberScheduled), int64(x.Status.NumberAvailable), labels.FormatLabels(x.Spec.Template.Spec.NodeSelector),
			age, c, i, metav1.FormatLabelSelector(x.Spec.Selector)}
	case *appsv1.StatefulSet:
		c, i := containersImages(x.Spec.Template.Spec.Containers)
		return []any{x.Name, fmt.Sprintf("%d/%d", x.Status.ReadyReplicas, replicas(x.Spec.Replicas)), age, c, i}
	case *schedulingv1.PriorityClass:
		policy := string(v1.PreemptLowerPriority) // the API server's default
		if x.PreemptionPolicy != nil {
			policy = string(*x.PreemptionPolicy)
		}
		return []any{x.Name, int64(x.Value), x.GlobalDefault, age, policy}
	case *coordinationv1.Lease:
		holder := ""
		if x.Spec.HolderIdentity != nil {
			holder = *x.Spec.HolderIdentity
		}
		return []any{x.Name, holder, age}
	case *policyv1.PodDisruptionBudget:
		minA, maxU := "N/A", "N/A"
		if x.Spec.MinAvailable != nil {
			minA = x.Spec.MinAvailable.String()
		}
		if x.Spec.MaxUnavailable != nil {
			maxU = x.Spec.MaxUnavailable.String()
		}
		return []any{x.Name, minA, maxU, int64(x.Status.DisruptionsAllowed), age}
	}
	return []any{o.GetName(), age}
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// since is translateTimestampSince: "<unknown>" for a zero time.
func since(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// readinessGates is "ready/total" of the pod's readiness gates.
func readinessGates(p *v1.Pod) string {
	if len(p.Spec.ReadinessGates) == 0 {
		return "<none>"
	}
	ready := 0
	for _, g := range p.Spec.ReadinessGates {
		for _, c := range p.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == v1.ConditionTrue {
				ready++
				break
			}
		}
	}
	return fmt.Sprintf("%d/%d", ready, len(p.Spec.ReadinessGates))
}

func containersImages(cs []v1.Container) (string, string) {
	var names, images []string
	for _, c := range cs {
		names = append(names, c.Name)
		images = append(images, c.Image)
	}
	return strings.Join(names, ","), strings.Join(images, ",")
}

// nodeCells is printNode's row.
func nodeCells(n *v1.Node, age string) []any {
	conditions := map[v1.NodeConditionType]v1.ConditionStatus{}
	for _, c := range n.Status.Conditions {
		conditions[c.Type] = c.Status
	}
	var status []string
	switch conditions[v1.NodeReady] {
	case v1.ConditionTrue:
		status = append(status, "Ready")
	case "":
		status = append(status, "Unknown")
	default:
		status = append(status, "NotReady")
	}
	if n.Spec.Unschedulable {
		status = append(status, "SchedulingDisabled")
	}
	roles := nodeRoles(n)
	info := n.Status.NodeInfo
	return []any{n.Name, strings.Join(status, ","), roles, age, info.KubeletVersion,
		address(n, v1.NodeInternalIP), address(n, v1.NodeExternalIP), orUnknown(info.OSImage),
		orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion)}
}

// nodeRoles are the node-role.kubernetes.io/ROLE and kubernetes.io/role
// labels, "<none>" without.
func nodeRoles(n *v1.Node) string {
	var roles []string
	for k, v := range n.Labels {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if role := strings.TrimPrefix(k, "node-role.kubernetes.io/"); role != "" {
				roles = append(roles, role)
			}
		case k == "kubernetes.io/role" && v != "":
			roles = append(roles, v)
		}
	}
	if len(roles) == 0 {
		return "<none>"
	}
	sort.Strings(roles)
	return strings.Join(roles, ",")
}

func address(n *v1.Node, t v1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return "<none>"
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

// eventCells is printEvent's row.
func eventCells(e *v1.Event, now time.Time) []any {
	first := since(e.FirstTimestamp, now)
	if e.FirstTimestamp.IsZero() && !e.EventTime.IsZero() {
		first = duration.HumanDuration(now.Sub(e.EventTime.Time))
	}
	last := since(e.LastTimestamp, now)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if count == 0 {
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	source := e.ReportingController
	if e.Source.Component != "" {
		source = e.Source.Component
		if e.Source.Host != "" {
			source += ", " + e.Source.Host
		}
	}
	return []any{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message), first, int64(count), e.Name}
}
