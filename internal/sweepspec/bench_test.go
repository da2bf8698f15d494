package sweepspec

import "testing"

// BenchmarkExpandMaxGrid expands the largest grid, 100 × 100 = 10000
// trials (each one's job spec parsed by jobspec).
func BenchmarkExpandMaxGrid(b *testing.B) {
	s := mustParse(b, "parameters: {training.batch_size: {grid: ["+nums(100)+"]}, training.learning_rate: {grid: ["+floats(100)+"]}}\n")
	for b.Loop() {
		if trials := mustExpand(b, s); len(trials) != 10000 {
			b.Fatalf("%d trials", len(trials))
		}
	}
}
