package main

import (
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/metrics"
)

// Memory is where podhub's memory goes, after collections that let the
// runtime shrink parked goroutines' stacks (GET /v1/debug/memory on the
// API socket; the benchmark divides it by the devices connected).
type Memory struct {
	Goroutines int `json:"goroutines"`
	// StackBytes are the goroutine stacks in use.
	StackBytes uint64 `json:"stackBytes"`
	// HeapLiveBytes are the heap objects alive after a collection;
	// HeapFreeBytes the heap the runtime holds but does not use (the GC's
	// headroom and fragmentation), not yet returned to the kernel.
	HeapLiveBytes uint64 `json:"heapLiveBytes"`
	HeapFreeBytes uint64 `json:"heapFreeBytes"`
	// RuntimeBytes are the runtime's own structures: spans, GC metadata,
	// profiling buckets and the rest.
	RuntimeBytes uint64 `json:"runtimeBytes"`
	// SysBytes is everything the runtime has mapped and not released.
	SysBytes uint64 `json:"sysBytes"`
	// AllocatedBytes counts every allocation since start; GCs the
	// collections the runtime started by itself (not forced ones).
	AllocatedBytes uint64 `json:"allocatedBytes"`
	GCs            uint32 `json:"gcs"`
	// GCCPUSeconds is the CPU time the collector has used since start,
	// without what it took from otherwise idle processors.
	GCCPUSeconds float64 `json:"gcCPUSeconds"`
}

// readMemory collects until parked stacks have shrunk as far as they go
// (each collection halves a stack at most once) and reads the totals.
func readMemory() Memory {
	for range 4 {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	gcCPU := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/idle:cpu-seconds"}}
	metrics.Read(gcCPU)
	return Memory{
		Goroutines:     runtime.NumGoroutine(),
		StackBytes:     m.StackInuse,
		HeapLiveBytes:  m.HeapAlloc,
		HeapFreeBytes:  m.HeapInuse + m.HeapIdle - m.HeapReleased - m.HeapAlloc,
		RuntimeBytes:   m.MSpanInuse + m.MCacheInuse + m.GCSys + m.OtherSys + m.BuckHashSys,
		SysBytes:       m.Sys - m.HeapReleased,
		AllocatedBytes: m.TotalAlloc,
		GCs:            m.NumGC - m.NumForcedGC,
		GCCPUSeconds:   gcCPU[0].Value.Float64() - gcCPU[1].Value.Float64(),
	}
}

// handleDebug adds the memory breakdown and Go's profiles to the API
// (the socket is the operator's: 0660, in the data dir).
func handleDebug(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/debug/memory", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, readMemory(), nil)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
