package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestListFollowsEmptyPages: the scheduler may answer a page with no jobs
// and a next cursor (it passed over other teams' jobs); `lathe list` must
// follow the cursor instead of stopping there. The server is an httptest
// stand-in of the list endpoint, named as such.
func TestListFollowsEmptyPages(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/jobs" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("cursor") {
		case "":
			json.NewEncoder(w).Encode(map[string]any{"jobs": []jobtype.Job{}, "next_cursor": "c1"})
		case "c1":
			json.NewEncoder(w).Encode(map[string]any{"jobs": []jobtype.Job{}, "next_cursor": "c2"})
		case "c2":
			json.NewEncoder(w).Encode(map[string]any{"jobs": []jobtype.Job{{ID: "j-ours", Name: "ours", State: jobtype.StateQueued, CreatedAt: time.Now()}}})
		default:
			http.Error(w, "bad cursor", http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	res := lathe(t, srv.URL, "list")
	if res.code != 0 || !strings.Contains(res.stdout, "j-ours") {
		t.Fatalf("lathe list = %d, stdout %q, stderr %q; want the job behind two empty pages", res.code, res.stdout, res.stderr)
	}
}
