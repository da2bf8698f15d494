package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
	"github.com/lathe-ml/lathe/scheduler/sim"
)

// checkSpotFlags refuses --spot-interruptions on a config with no spot
// backend, and a rate at which jobs would hardly ever keep any progress
// over a start-up and a checkpoint interval.
func checkSpotFlags(cfg routecfg.Config, f simFlags) error {
	if f.spotRate <= 0 {
		return nil
	}
	if len(sim.SpotBackends(cfg)) == 0 {
		return usageErrorf("--spot-interruptions %v: no cloud backend of --config %s buys spot (spot: prefer or only), so nothing would be interrupted; configs/simulate-spot.yaml is configs/simulate.yaml buying spot", f.spotRate, f.config)
	}
	if f.cloudStartup > 0 {
		cfg.Backends = slices.Clone(cfg.Backends) // the caller's stay as they are
		for i := range cfg.Backends {
			if cfg.Backends[i].Kind != routecfg.KindLocal {
				cfg.Backends[i].Startup = f.cloudStartup
			}
		}
	}
	if err := sim.SpotProgress(cfg, f.spotRate, f.checkpointEvery); err != nil {
		return usageErrorf("--spot-interruptions %v with --checkpoint-every %s and --cloud-startup %s: %w", f.spotRate, f.checkpointEvery, f.cloudStartup, err)
	}
	return nil
}

// reality records in rep the what-ifs of instance start-up and spot
// interruptions that f gives.
func (rep *simReport) reality(f simFlags) {
	if f.cloudStartup > 0 {
		rep.CloudStartup = f.cloudStartup.String()
	}
	rep.DatasetGB, rep.StagingMBps = f.datasetGB, f.stagingMBps
	if f.spotRate > 0 {
		rep.SpotInterruptions = f.spotRate
		rep.CheckpointEvery = "on the notice"
		if f.checkpointEvery > 0 {
			rep.CheckpointEvery = f.checkpointEvery.String()
		}
	}
}

// realityLine is the header's line on start-up and spot interruptions; ""
// when neither was asked for.
func (rep *simReport) realityLine() string {
	var parts []string
	if rep.CloudStartup != "" {
		parts = append(parts, "every cloud backend starts a job after "+rep.CloudStartup+" (routing counts it as the backend's wait)")
	}
	if rep.DatasetGB > 0 {
		rate := "each cloud backend's staging_mbps"
		if rep.StagingMBps > 0 {
			rate = strconv.FormatFloat(rep.StagingMBps, 'g', -1, 64) + " MB/s"
		}
		parts = append(parts, "every job's dataset is "+strconv.FormatFloat(rep.DatasetGB, 'g', -1, 64)+" GB, staged into a cloud site at "+rate+
			" after the start-up (routing counts it in the backend's wait)")
	}
	if rep.SpotInterruptions > 0 {
		ck := rep.CheckpointEvery
		if ck != "on the notice" {
			ck = "every " + ck
		}
		parts = append(parts, "spot interruptions "+strconv.FormatFloat(rep.SpotInterruptions, 'g', -1, 64)+" per instance-hour, checkpoints "+ck)
	}
	if len(parts) == 0 {
		return ""
	}
	return "What-if: " + strings.Join(parts, "; ")
}

// writeInterruptions writes each run's spot interruptions, the GPU-hours
// they lost and what that lost work cost, when interruptions were asked for.
func writeInterruptions(w io.Writer, rep simReport) {
	if rep.SpotInterruptions <= 0 {
		return
	}
	fmt.Fprintln(w, "\nSpot interruptions (work lost since the last checkpoint; its cost is in CLOUD $):")
	for _, s := range rep.Runs {
		fmt.Fprintf(w, "  %d owned, %s: %d interruptions, %.1f GPU-hours lost (%s)\n", s.Owned, s.Estimates, s.Interruptions, s.LostGPUHours, dollars(s.LostCostUSD))
	}
}

// stagingWarning says when --dataset-gb is given but no cloud backend
// times staging (no --staging-mbps, no staging_mbps in the config): the
// datasets would move in no time.
func stagingWarning(cfg routecfg.Config, f simFlags) string {
	if f.datasetGB <= 0 || f.stagingMBps > 0 {
		return ""
	}
	for _, b := range cfg.Backends {
		if b.Kind != routecfg.KindLocal && b.StagingMBps > 0 {
			return ""
		}
	}
	return "--dataset-gb " + strconv.FormatFloat(f.datasetGB, 'g', -1, 64) + " but no cloud backend of --config " + f.config +
		" gives staging_mbps, and --staging-mbps is not set: staging is not timed (it counts 0)"
}
