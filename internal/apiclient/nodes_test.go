package apiclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestGPUsNodesGPUSeries runs GPUs, Nodes and GPUSeries against an httptest
// stand-in serving those three endpoints' documented shapes.
func TestGPUsNodesGPUSeries(t *testing.T) {
	var empty atomic.Bool // answer {} (no lists) once set
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case empty.Load() && (r.URL.Path == "/api/v1/gpus" || r.URL.Path == "/api/v1/nodes"):
			io.WriteString(w, `{}`)
		case r.URL.Path == "/api/v1/gpus":
			io.WriteString(w, `{"gpus":[{"node":"n1","index":0,"uuid":"GPU-a","name":"NVIDIA H100 80GB HBM3","memory_total_mb":81559,"memory_used_mb":4000,"healthy":true,"job_id":"j-1"},`+
				`{"node":"n1","index":1,"healthy":false,"unhealthy":"XID 79","job_id":"","simulated":true}]}`)
		case r.URL.Path == "/api/v1/nodes":
			io.WriteString(w, `{"nodes":[{"name":"n1","backend":"local","incarnation":"i1","started_at":"2026-12-02T15:00:00Z","seen_at":"2026-12-02T15:04:00Z",`+
				`"slots":2,"cpu_reserved":1,"gpus":8,"gpus_free":5,"gpus_unhealthy":1,"driver":"550.54.15","cuda":"12.4","simulated":true,"jobs":["j-1","j-2"]}]}`)
		case r.URL.Path == "/api/v1/jobs/j-1/gpu":
			io.WriteString(w, `{"step_ns":5000000000,"points":[{"t":1000,"gpus":[{"index":0,"utilization_pct":97.5,"memory_used_mb":4000,"power_w":300,"temperature_c":61}]}]}`)
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"no job","code":"not_found"}`)
		}
	}))
	ctx := context.Background()
	gpus, err := c.GPUs(ctx)
	if err != nil || len(gpus) != 2 || gpus[0].JobID != "j-1" || gpus[0].MemoryTotalMB != 81559 || gpus[1].Healthy || gpus[1].Unhealthy != "XID 79" || !gpus[1].Simulated {
		t.Fatalf("GPUs = %+v, %v", gpus, err)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].GPUsFree != 5 || nodes[0].GPUsUnhealthy != 1 || len(nodes[0].Jobs) != 2 ||
		!nodes[0].SeenAt.Equal(time.Date(2026, 12, 2, 15, 4, 0, 0, time.UTC)) {
		t.Fatalf("Nodes = %+v, %v", nodes, err)
	}
	s, err := c.GPUSeries(ctx, "j-1")
	if err != nil || s.Step != 5*time.Second || len(s.Points) != 1 || s.Points[0].GPUs[0].Util != 97.5 {
		t.Fatalf("GPUSeries = %+v, %v", s, err)
	}
	var ae *APIError
	if _, err := c.GPUSeries(ctx, "j-404"); !errors.As(err, &ae) || ae.Code != CodeNotFound {
		t.Fatalf("GPUSeries of an unknown job: %v", err)
	}
	empty.Store(true)
	if gpus, err := c.GPUs(ctx); err != nil || gpus == nil || len(gpus) != 0 {
		t.Fatalf("no GPUs: %#v, %v (want an empty, non-nil list)", gpus, err)
	}
	if nodes, err := c.Nodes(ctx); err != nil || nodes == nil || len(nodes) != 0 {
		t.Fatalf("no nodes: %#v, %v (want an empty, non-nil list)", nodes, err)
	}
}
