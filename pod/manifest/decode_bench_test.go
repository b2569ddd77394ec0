package manifest

import "testing"

// benchPod is a typical device process pod: two containers with probes,
// limits and environment.
const benchPod = `apiVersion: v1
kind: Pod
metadata:
  name: gateway
  namespace: edge
  labels: {app: gateway, tier: device}
  annotations: {example.com/owner: ops}
spec:
  runtimeClassName: process
  restartPolicy: Always
  terminationGracePeriodSeconds: 10
  containers:
  - name: app
    image: host
    command: ["/usr/bin/gateway", "--listen", ":8080"]
    env:
    - {name: MODE, value: device}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    ports:
    - {name: http, containerPort: 8080}
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 500m, memory: 64Mi}
    readinessProbe:
      httpGet: {path: /ready, port: 8080}
      periodSeconds: 5
    livenessProbe:
      tcpSocket: {port: 8080}
      initialDelaySeconds: 3
  - name: shipper
    image: host
    command: ["/usr/bin/shipper", "-dir", "/data"]
    resources:
      limits: {memory: 16Mi}
`

// BenchmarkDecode is a manifest file read: YAML decode, defaults and
// validation of one pod.
func BenchmarkDecode(b *testing.B) {
	data := []byte(benchPod)
	b.ReportAllocs()
	for b.Loop() {
		if pods, err := Decode(data); err != nil || len(pods) != 1 {
			b.Fatalf("decode = %d pods, %v", len(pods), err)
		}
	}
}
