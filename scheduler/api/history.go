package api

import (
	"net/http"
	"strconv"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/wire"
)

// historyMax is the most samples GET /api/v1/history answers.
const historyMax = 1000

// history answers GET /api/v1/history[?limit=N]: the newest N (default
// every kept) of the leader's samples of the pool, oldest first; one
// LRANGE. They are counts over every team's jobs and GPUs, with no job id
// or name, like GET /api/v1/queues: a team's token reads them too.
func (s opsView) history(w http.ResponseWriter, r *http.Request) {
	limit := historyMax
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > historyMax {
			writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad limit", Code: "invalid",
				Fields: []jobspec.FieldError{{Field: "limit", Value: v, Message: "want 1 to " + strconv.Itoa(historyMax)}}})
			return
		}
		limit = n
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	pts, err := s.store.History(ctx, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.History{Points: pts})
}
