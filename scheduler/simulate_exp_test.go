package scheduler

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/trace"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

func TestSimExperiment(t *testing.T) {
	if os.Getenv("SIMEXP") == "" {
		t.Skip()
	}
	f, _ := os.Open("../../shared/traces/msft-itp-cluster02.csv")
	tj, err := trace.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile("../configs/simulate.yaml")
	cfg, err := routecfg.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []SimJob
	var rj []refJob
	for i, j := range tj {
		jobs = append(jobs, SimJob{ID: fmt.Sprintf("t%05d", i), Submit: time.Duration(j.SubmitS * 1e9), Duration: time.Duration(j.DurationS * 1e9), GPUs: j.GPUs})
		if os.Getenv("ORACLE") != "" {
			jobs[i].Hint = jobs[i].Duration
		}
		rj = append(rj, refJob{submit: jobs[i].Submit, dur: jobs[i].Duration, gpus: j.GPUs})
	}
	for _, owned := range []int{64, 128} {
		ref := clairvoyant(rj, owned, 2*time.Hour)
		var rc float64
		var rw time.Duration
		for i, o := range ref {
			rw += o.wait
			if o.rented {
				rc += rj[i].dur.Hours() * float64(rj[i].gpus) * 4
			}
		}
		var hz time.Duration
		for _, j := range rj {
			hz = max(hz, j.submit+j.dur)
		}
		rc += float64(owned) * hz.Hours()
		start := time.Now()
		res, err := Simulate(context.Background(), SimSetup{Config: cfg, Owned: owned, GPUName: "NVIDIA H100 80GB HBM3", GPUMemoryMB: 81559, MaxWait: 2 * time.Hour}, jobs)
		if err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		var sw time.Duration
		var ws []float64
		stuck, refused, cloud := 0, 0, 0
		for _, o := range res.Jobs {
			sw += o.Wait
			ws = append(ws, o.Wait.Seconds())
			if o.Stuck {
				stuck++
			}
			if o.Refused {
				refused++
			}
			if o.Cloud {
				cloud++
			}
		}
		tot := res.OwnedCostUSD + res.CloudCostUSD
		t.Logf("owned %d: ref cost %.0f mean wait %.0fs | sim cost %.0f (%.3fx) mean wait %.0fs (%.2fx) p95 %.0fs stuck %d refused %d cloud %d rounds %d in %s viol %d",
			owned, rc, rw.Seconds()/float64(len(rj)), tot, tot/rc, sw.Seconds()/float64(len(rj)), sw.Seconds()/rw.Seconds(), Quantile(ws, 0.95), stuck, refused, cloud, res.Rounds, el, len(res.Violations))
	}
}
