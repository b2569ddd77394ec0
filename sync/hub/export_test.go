package hub

// WorkloadDetailOf is describe's answer for a workload, without the API.
func WorkloadDetailOf(f *Fleet, kind, namespace, name string) (WorkloadDetail, error) {
	return f.workloadDetail(kind, namespace, name)
}
