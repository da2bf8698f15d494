//go:build !cgo

package nvmlinventory

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// Without cgo there is no go-nvml: auto gives 0 GPUs and says why, simulated is refused.
func TestOpenWithoutCgo(t *testing.T) {
	var logs bytes.Buffer
	src, err := Open(context.Background(), "auto", "n1", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("Open(auto): %v", err)
	}
	inv, err := src.Inventory(context.Background())
	if err != nil || len(inv.GPUs) != 0 {
		t.Fatalf("Inventory = %+v, %v; want 0 GPUs", inv, err)
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "without cgo") {
		t.Fatalf("log = %q, want one line about cgo", logs.String())
	}
	if _, err := Open(context.Background(), "simulated:dgxh100", "n1", nil); err == nil || !strings.Contains(err.Error(), "simulated:dgxh100") {
		t.Fatalf("Open(simulated) without cgo: err = %v", err)
	}
}
