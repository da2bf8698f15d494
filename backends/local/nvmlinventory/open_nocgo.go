//go:build !cgo

package nvmlinventory

import (
	"context"
	"fmt"
	"log/slog"
)

// Open returns the Source a --gpus value asks for (see [ParseGPUsFlag]). This build has
// no cgo, so no NVML: auto logs one line and returns a Source with 0 GPUs; simulated
// GPUs, which also come from go-nvml, are an error. Build with CGO_ENABLED=1 for GPUs.
func Open(ctx context.Context, spec, node string, logger *slog.Logger) (Source, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s, err := ParseGPUsFlag(spec)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nvmlinventory: open %s: %w", s, err)
	}
	switch s.Kind {
	case KindNone:
		logger.Info("--gpus none: 0 GPUs, CPU jobs only")
	case KindSimulated:
		return nil, fmt.Errorf("--gpus %q: simulated GPUs need a build with cgo (CGO_ENABLED=1); this one has none", spec)
	default:
		logger.Info("built without cgo, so without NVML: 0 GPUs, CPU jobs only (build with CGO_ENABLED=1 for GPUs)")
	}
	return noGPUs{}, nil
}
