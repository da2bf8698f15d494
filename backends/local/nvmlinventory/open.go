//go:build cgo

package nvmlinventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// noDriverMessage is the one line Open logs on a machine without libnvidia-ml.
const noDriverMessage = "no NVIDIA driver (libnvidia-ml not found): 0 GPUs, CPU jobs only"

// Open returns the Source a --gpus value asks for (see [ParseGPUsFlag]); node names the
// machine and seeds simulated GPU UUIDs. auto loads the real NVML; where
// libnvidia-ml.so.1 is absent it logs one line and returns a Source with 0 GPUs, never
// an error, so the worker still runs CPU jobs. Where the library is there but fails
// (a driver/library version mismatch, say), Open returns the error: that machine needs
// fixing, or --gpus none. A nil logger discards.
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
		return noGPUs{}, nil
	case KindSimulated:
		sim, err := NewSimulated(s.Server, node)
		if err != nil {
			return nil, err
		}
		src, err := New(sim, Options{Logger: logger, Simulated: true})
		if err != nil {
			return nil, fmt.Errorf("nvmlinventory: open %s: %w", s, err)
		}
		logger.Info("simulated GPUs: fakes from go-nvml's mock server, jobs run on the CPU",
			slog.String("server", s.Server), slog.Int("gpus", len(sim.gpus)))
		return src, nil
	}
	return openAuto(nvml.New(), logger)
}

// openAuto is Open for --gpus auto over lib, injected so that tests can play a machine
// without the driver.
func openAuto(lib nvml.Interface, logger *slog.Logger) (Source, error) {
	src, err := New(lib, Options{Logger: logger})
	if errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		logger.Info(noDriverMessage)
		return noGPUs{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nvmlinventory: --gpus auto: %w (--gpus none runs CPU jobs only)", err)
	}
	return src, nil
}
