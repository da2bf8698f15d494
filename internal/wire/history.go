package wire

import "github.com/lathe-ml/lathe/internal/jobtype"

// History is the answer of GET /api/v1/history: the leader's samples of
// the pool, oldest first (jobtype.HistorySample; every team's jobs
// counted, as GET /api/v1/queues counts them).
type History struct {
	Points []jobtype.HistorySample `json:"points"`
}
