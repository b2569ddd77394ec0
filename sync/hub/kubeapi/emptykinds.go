package kubeapi

import (
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Services, ReplicaSets and the other kinds a fleet does not have (Jobs,
// CronJobs, volumes, autoscalers, ingresses, network policies, service
// accounts) are served empty: a Deployment's pods are placed by the hub,
// not through ReplicaSets, and devices run no cluster network; yet the
// views that list them with the rest (k9s's workloads and pulses,
// kubectl get all) need an answer, not a 404 or a denied review. The two
// kubectl shows beside real rows keep the API server's columns.
var (
	serviceColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Type", Type: "string", Description: v1.ServiceSpec{}.SwaggerDoc()["type"]},
		{Name: "Cluster-IP", Type: "string", Description: v1.ServiceSpec{}.SwaggerDoc()["clusterIP"]},
		{Name: "External-IP", Type: "string", Description: v1.ServiceSpec{}.SwaggerDoc()["externalIPs"]},
		{Name: "Port(s)", Type: "string", Description: v1.ServiceSpec{}.SwaggerDoc()["ports"]},
		colAge,
		{Name: "Selector", Type: "string", Priority: 1, Description: v1.ServiceSpec{}.SwaggerDoc()["selector"]},
	}
	replicaSetColumns = []metav1.TableColumnDefinition{colName,
		{Name: "Desired", Type: "integer", Description: appsv1.ReplicaSetSpec{}.SwaggerDoc()["replicas"]},
		{Name: "Current", Type: "integer", Description: appsv1.ReplicaSetStatus{}.SwaggerDoc()["replicas"]},
		{Name: "Ready", Type: "integer", Description: appsv1.ReplicaSetStatus{}.SwaggerDoc()["readyReplicas"]},
		colAge,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: appsv1.ReplicaSetSpec{}.SwaggerDoc()["selector"]},
	}
)
