package trace

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestReadSharedTrace(t *testing.T) {
	f, err := os.Open("../../configs/traces/msft-itp-cluster02.csv")
	if err != nil {
		t.Fatalf("the shared trace: %v", err)
	}
	defer f.Close()
	jobs, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	gpuHours := 0.0
	for _, j := range jobs {
		gpuHours += j.DurationS / 3600 * float64(j.GPUs)
	}
	// configs/traces/README.md: 5,778 jobs, 123,748 GPU-hours.
	if len(jobs) != 5778 || gpuHours < 123747 || gpuHours > 123749 {
		t.Fatalf("%d jobs, %.0f GPU-hours; want 5778 and 123748", len(jobs), gpuHours)
	}
	if jobs[0].SubmitS != 0 || jobs[0].ID != "" || jobs[0].CostUSD != -1 {
		t.Errorf("first job %+v", jobs[0])
	}
}

func TestRoundTrip(t *testing.T) {
	in := []Job{
		{SubmitS: 0, DurationS: 12.5, GPUs: 8, GPUModel: "NVIDIA H100 80GB HBM3", Residency: []string{"eu", "de"}, Priority: "urgent", Backend: "local", CostUSD: 1.25, ID: "j-1"},
		{SubmitS: 3, DurationS: 60, GPUs: 0, CostUSD: -1, ID: "j-2"},
		{SubmitS: 7, DurationS: 1, GPUs: 1, GPUModel: "=cmd()", Backend: "@evil", CostUSD: 0, ID: "j-3"},
	}
	var b bytes.Buffer
	if err := Write(&b, in); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), ",=cmd") || strings.Contains(b.String(), ",@evil") {
		t.Errorf("a formula reached the CSV unguarded:\n%s", b.String())
	}
	out, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || out[0].GPUModel != in[0].GPUModel || strings.Join(out[0].Residency, ";") != "eu;de" ||
		out[0].Priority != "urgent" || out[0].CostUSD != 1.25 || out[1].CostUSD != -1 || out[2].GPUModel != "'=cmd()" || out[1].ID != "j-2" {
		t.Fatalf("round trip: %+v", out)
	}
}

func TestReadErrors(t *testing.T) {
	for _, c := range []struct{ csv, want string }{
		{"", "empty file"},
		{"submit_s,gpus\n0,1\n", `missing column "duration_s"`},
		{"submit_s,duration_s,gpus\n", "no jobs"},
		{"submit_s,duration_s,gpus\n0,x,1\n", `line 2: duration_s "x": not a number`},
		{"submit_s,duration_s,gpus\n0,1,1.5\n", `gpus "1.5": not a whole number`},
		{"submit_s,duration_s,gpus\n0,1,5000\n", `gpus "5000": out of range`},
		{"submit_s,duration_s,gpus\n-1,1,1\n", `submit_s "-1": out of range`},
		{"submit_s,duration_s,gpus\n0,NaN,1\n", `duration_s "NaN": not a number`},
		{"submit_s,duration_s,gpus,priority\n0,1,1,asap\n", `priority "asap"`},
		{"submit_s,duration_s,gpus,residency\n0,1,1,eu/west\n", `residency "eu/west"`},
		{"submit_s,submit_s,duration_s,gpus\n0,0,1,1\n", "appears twice"},
	} {
		_, err := Read(strings.NewReader(c.csv))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Read(%q): %v; want %q", c.csv, err, c.want)
		}
	}
	jobs, err := Read(strings.NewReader("duration_s,gpus,submit_s,extra\n5,1,9,x\n5,2,3,y\n"))
	if err != nil || len(jobs) != 2 || jobs[0].SubmitS != 3 || jobs[0].Line != 3 {
		t.Fatalf("reordered columns, unsorted rows: %+v %v", jobs, err)
	}
}
