package kinds

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

const goodFile = `
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: important
value: 1000
---
# a comment-only document is skipped
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      runtimeClassName: process
      containers:
      - name: agent
        image: host
        command: ["sleep", "infinity"]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: bridge
  namespace: lines
spec:
  selector:
    matchLabels: {app: bridge}
  template:
    metadata:
      labels: {app: bridge}
    spec:
      priorityClassName: important
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector:
          matchLabels: {app: bridge}
        matchLabelKeys: [pod-template-hash]
        minDomains: 3
      tolerations:
      - key: dedicated
        operator: Equal
        value: bridge
        effect: NoSchedule
      containers:
      - name: bridge
        image: host
        resources:
          requests: {cpu: 100m, memory: 32Mi}
---
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo"}, "spec": {"containers": [{"name": "c", "image": "host"}]}}
`

func TestDecodeAllFourKinds(t *testing.T) {
	objs, err := Decode("fleet.yaml", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.PriorityClasses) != 1 || len(objs.DaemonSets) != 1 || len(objs.Deployments) != 1 || len(objs.Pods) != 1 || objs.Len() != 4 {
		t.Fatalf("decoded %+v", objs)
	}
	d := objs.Deployments[0]
	if *d.Spec.Replicas != 1 || d.Namespace != "lines" || d.Spec.Strategy.RollingUpdate.MaxSurge.String() != "25%" ||
		d.Spec.Template.Spec.RestartPolicy != v1.RestartPolicyAlways {
		t.Errorf("deployment defaults: %+v", d.Spec)
	}
	if ds := objs.DaemonSets[0]; ds.Namespace != "default" || ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("daemonset defaults: %+v", ds.Spec.UpdateStrategy)
	}
	if pc := objs.PriorityClasses[0]; *pc.PreemptionPolicy != v1.PreemptLowerPriority {
		t.Errorf("priority class default policy %v", *pc.PreemptionPolicy)
	}
	if objs.Pods[0].Namespace != "default" {
		t.Errorf("pod namespace %q", objs.Pods[0].Namespace)
	}
}

const deploymentHead = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: host
`

func daemonSetHead(rollingUpdate string) string {
	return "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec:\n  updateStrategy: {rollingUpdate: " + rollingUpdate +
		"}\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec:\n      containers: [{name: c, image: host}]\n"
}

// A Deployment may surge past 100% (only maxUnavailable is bounded) and
// a DaemonSet may surge instead of taking pods down, as in Kubernetes.
func TestDecodeRollingUpdateBounds(t *testing.T) {
	for name, file := range map[string]string{
		"deployment surge 200%": strings.Replace(deploymentHead, "spec:\n  selector", "spec:\n  strategy: {rollingUpdate: {maxSurge: 200%, maxUnavailable: 0}}\n  selector", 1),
		"daemonset surge only":  daemonSetHead("{maxSurge: 100%, maxUnavailable: 0}"),
		"daemonset default":     daemonSetHead("{}"),
	} {
		if _, err := Decode("f.yaml", []byte(file)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	pc := "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: %s\nvalue: %s\n"
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unknown kind", "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: s}\n",
			`f.yaml: document 1: apiVersion "apps/v1" kind "ReplicaSet": podhub applies apiVersion v1 kind Pod, ConfigMap and Secret, apps/v1 DaemonSet, Deployment and StatefulSet, scheduling.k8s.io/v1 PriorityClass`},
		{"wrong group", "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: s}\n", `apiVersion "extensions/v1beta1" kind "Deployment"`},
		{"unknown field in template", deploymentHead + "        imagePolicy: Always\n",
			`f.yaml: document 1: Deployment "web": unknown field "spec.template.spec.containers[0].imagePolicy"`},
		{"unknown top-level field", deploymentHead + "  replica: 3\n", `unknown field "spec.replica"`},
		{"wrong type", strings.Replace(deploymentHead, "spec:\n  selector", "spec:\n  replicas: three\n  selector", 1),
			`Deployment "web": spec.replicas: expected int32, got string`},
		{"negative replicas", strings.Replace(deploymentHead, "spec:\n  selector", "spec:\n  replicas: -1\n  selector", 1),
			`Deployment "web": spec.replicas: Invalid value: -1: must be greater than or equal to 0`},
		{"too many replicas", strings.Replace(deploymentHead, "spec:\n  selector", "spec:\n  replicas: 1000000000\n  selector", 1),
			`spec.replicas: Invalid value: 1000000000: must be no more than 100000 (the hub's limit)`},
		{"selector does not match", strings.Replace(deploymentHead, "matchLabels: {app: web}", "matchLabels: {app: other}", 1),
			"Deployment \"web\": spec.template.metadata.labels: Invalid value: {\"app\":\"web\"}: `selector` does not match template `labels`"},
		{"no selector", strings.Replace(deploymentHead, "  selector:\n    matchLabels: {app: web}\n", "", 1), `spec.selector: Required value`},
		{"empty selector", strings.Replace(deploymentHead, "matchLabels: {app: web}", "matchLabels: {}", 1), `empty selector is invalid for deployment`},
		{"bad name", strings.Replace(deploymentHead, "name: web\n", "name: Web_1\n", 1), `metadata.name: Invalid value: "Web_1"`},
		{"no name", strings.Replace(deploymentHead, "name: web\n", "name: \"\"\n", 1), `metadata.name: Required value: name or generateName is required`},
		{"priority class bad name", strings.Replace(strings.Replace(pc, "%s", "Big_1", 1), "%s", "10", 1), `metadata.name: Invalid value: "Big_1"`},
		{"priority class no name", strings.Replace(strings.Replace(pc, "%s", `""`, 1), "%s", "10", 1), `metadata.name: Required value: name or generateName is required`},
		{"template restartPolicy", deploymentHead + "      restartPolicy: Never\n",
			`spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"`},
		{"template container invalid", strings.Replace(deploymentHead, "name: web\n        image", "name: Bad_Name\n        image", 1),
			`spec.template.spec.containers[0].name`},
		{"bad quantity", deploymentHead + "        resources:\n          requests: {memory: lots}\n",
			`Deployment "web": spec.template.spec.containers[0].resources.requests[memory]: Invalid value: "lots"`},
		{"pod affinity", deploymentHead + "      affinity:\n        podAffinity: {}\n", `spec.template.spec.affinity.podAffinity: Forbidden`},
		{"maxSkew zero", deploymentHead + "      topologySpreadConstraints:\n      - {maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n",
			`spec.template.spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than zero`},
		{"minDomains with ScheduleAnyway", deploymentHead + "      topologySpreadConstraints:\n      - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, minDomains: 2}\n",
			`can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway`},
		{"bad whenUnsatisfiable", deploymentHead + "      topologySpreadConstraints:\n      - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Sometimes}\n",
			`whenUnsatisfiable: Unsupported value: "Sometimes"`},
		{"matchLabelKeys in selector", deploymentHead + "      topologySpreadConstraints:\n      - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}, matchLabelKeys: [app]}\n",
			`exists in both matchLabelKeys and labelSelector`},
		{"toleration seconds without NoExecute", deploymentHead + "      tolerations:\n      - {key: k, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}\n",
			`spec.template.spec.tolerations[0].effect: Invalid value: "NoSchedule": effect must be 'NoExecute' when ` + "`tolerationSeconds` is set"},
		{"affinity operator", deploymentHead + "      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n            - matchExpressions: [{key: zone, operator: Near, values: [a]}]\n",
			`matchExpressions[0].operator: Unsupported value: "Near"`},
		{"template nodeName", deploymentHead + "      nodeName: dev1\n", `spec.template.spec.nodeName: Forbidden`},
		{"recreate with rollingUpdate", strings.Replace(deploymentHead, "spec:\n  selector", "spec:\n  strategy: {type: Recreate, rollingUpdate: {maxSurge: 1}}\n  selector", 1),
			"spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"},
		{"deployment negative percent", strings.Replace(deploymentHead, "spec:\n  selector", "spec:\n  strategy: {rollingUpdate: {maxSurge: \"-5%\"}}\n  selector", 1),
			`spec.strategy.rollingUpdate.maxSurge: Invalid value: "-5%": a valid percent string must be a numeric string followed by an ending '%'`},
		{"deployment signed percent", strings.Replace(deploymentHead, "spec:\n  selector", "spec:\n  strategy: {rollingUpdate: {maxUnavailable: \"+5%\"}}\n  selector", 1),
			`spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "+5%"`},
		{"deployment unavailable over 100%", strings.Replace(deploymentHead, "spec:\n  selector", "spec:\n  strategy: {rollingUpdate: {maxUnavailable: 101%}}\n  selector", 1),
			`spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "101%": must not be greater than 100%`},
		{"deployment both zero", strings.Replace(deploymentHead, "spec:\n  selector", "spec:\n  strategy: {rollingUpdate: {maxUnavailable: 0%, maxSurge: 0}}\n  selector", 1),
			"spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"0%\": may not be 0 when `maxSurge` is 0"},
		{"failure threshold", strings.Replace(deploymentHead, "spec:\n  selector", "  annotations: {rollout.podvisor.io/failure-threshold: \"120%\"}\nspec:\n  selector", 1),
			`metadata.annotations[rollout.podvisor.io/failure-threshold]: Invalid value: "120%": "120%" is not a percentage from 1% to 100%`},
		{"another scheduler", deploymentHead + "      schedulerName: my-scheduler\n",
			`spec.template.spec.schedulerName: Unsupported value: "my-scheduler": supported values: "default-scheduler"`},
		{"deployment activeDeadlineSeconds", deploymentHead + "      activeDeadlineSeconds: 5\n",
			`spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported`},
		{"daemonset surge and unavailable", daemonSetHead("{maxSurge: 1, maxUnavailable: 1}"),
			`DaemonSet "agent": spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: may not be set when maxUnavailable is non-zero`},
		{"daemonset both zero", daemonSetHead("{maxSurge: 0%, maxUnavailable: 0}"),
			`spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0`},
		{"daemonset surge over 100%", daemonSetHead("{maxSurge: 150%, maxUnavailable: 0}"),
			`spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: "150%": must not be greater than 100%`},
		{"daemonset negative", daemonSetHead("{maxUnavailable: -1}"),
			`spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: -1: must be greater than or equal to 0`},
		{"system priority class", strings.Replace(strings.Replace(pc, "%s", "system-mine", 1), "%s", "10", 1), `reserved for system use only`},
		{"priority too high", strings.Replace(strings.Replace(pc, "%s", "huge", 1), "%s", "2000000000", 1),
			`value: Forbidden: maximum allowed value of a user defined priority is 1000000000`},
		{"duplicate", deploymentHead + "---\n" + deploymentHead, `f.yaml: document 2: Deployment default/web: also in document 1`},
		{"daemonset selector", "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: a}\nspec:\n  selector: {matchLabels: {app: x}}\n  template:\n    metadata: {labels: {app: other}}\n    spec:\n      containers: [{name: c, image: host}]\n",
			"`selector` does not match template `labels`"},
		{"pod with bad toleration", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  tolerations: [{value: x}]\n  containers: [{name: c, image: host}]\n",
			`pod "p": spec.tolerations[0].operator`},
		{"pod with a controller", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-5d4f8, uid: u, controller: true}]\nspec:\n  containers: [{name: c, image: host}]\n",
			`f.yaml: document 1: pod "p": metadata.ownerReferences[0]: Forbidden: a pod applied by itself has no controller`},
		{"empty file", "# nothing\n", "f.yaml: no objects"},
		{"not YAML", "kind: [\n", "f.yaml: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("f.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n %q\nwant it to contain\n %q", err, tc.want)
			}
		})
	}
}

func TestDecodeBounds(t *testing.T) {
	big := make([]byte, 11<<20)
	if _, err := Decode("big.yaml", big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized file: %v", err)
	}
	many := strings.Repeat("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: host}]}\n---\n", MaxDocuments+1)
	if _, err := Decode("many.yaml", []byte(many)); err == nil || !strings.Contains(err.Error(), "more than the 1000 allowed") {
		t.Errorf("too many documents: %v", err)
	}
}

func TestDecodePodDisruptionBudget(t *testing.T) {
	objs, err := Decode("pdb.yaml", []byte(`
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  maxUnavailable: 25%
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector: {matchLabels: {app: web}}
status: {disruptionsAllowed: 9}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.PDBs) != 1 || objs.Len() != 1 {
		t.Fatalf("objects %+v", objs)
	}
	pdb := objs.PDBs[0]
	if pdb.Namespace != "default" || pdb.Spec.MaxUnavailable.StrVal != "25%" || pdb.Status.DisruptionsAllowed != 0 {
		t.Fatalf("budget %+v", pdb)
	}
	for _, tc := range []struct{ spec, want string }{
		{"minAvailable: 1\n  maxUnavailable: 1", "spec: Invalid value"},
		{"minAvailable: 1\n  maxUnavailable: 1", "minAvailable and maxUnavailable cannot be both set"},
		{"minAvailable: 120%", `spec.minAvailable: Invalid value: "120%": must not be greater than 100%`},
		{"maxUnavailable: -1", "spec.maxUnavailable: Invalid value: -1: must be greater than or equal to 0"},
		{"maxUnavailable: 1.5", "spec.maxUnavailable"},
		{"minAvailable: x%", `spec.minAvailable: Invalid value: "x%"`},
		{"minAvailable: 1\n  unhealthyPodEvictionPolicy: Never", `spec.unhealthyPodEvictionPolicy: Unsupported value: "Never": supported values: "AlwaysAllow", "IfHealthyBudget"`},
		{"minAvailable: 1\n  minavailable: 2", `unknown field "spec.minavailable"`},
	} {
		file := "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\nspec:\n  " + tc.spec + "\n  selector: {matchLabels: {app: web}}\n"
		if _, err := Decode("pdb.yaml", []byte(file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.spec, err, tc.want)
		}
	}
	bad := "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\nspec:\n  minAvailable: 1\n  selector: {matchExpressions: [{key: app, operator: In}]}\n"
	if _, err := Decode("pdb.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "spec.selector.matchExpressions[0].values") {
		t.Errorf("selector without values: %v", err)
	}
}
