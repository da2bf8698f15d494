package jobstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// LossSeriesMax is how many points a job's loss series keeps: the
// dashboard's sparklines draw it (GET /api/v1/overview's running jobs).
const LossSeriesMax = 32

// The loss series (key job:<id>:loss, a list of "step loss" strings) is a
// downsampled curve of a job's training loss over its whole run, kept by
// the append script as each progress update is recorded (the one place
// progress is written), so that reading it costs one LRANGE of at most
// LossSeriesMax short strings whatever the run's length. AddLossPoint is
// the same rule in Go; the store's tests hold the script to it.
//
// For each progress update (step, loss):
//
//  1. Points at or past step are dropped from the end: the run went back to
//     an earlier step (a new attempt from scratch, or resumed from an older
//     checkpoint), and the curve is the loss at each step of the run as it
//     now stands.
//  2. With two or more points, the update is kept only when it is at least
//     the points' mean spacing ((last step − first step)/(points − 1)) past
//     the last point; so the points stay about evenly spaced.
//  3. When that makes LossSeriesMax+1 points, every other one is dropped
//     (the first and the last stay): LossSeriesMax/2+1 points remain, and
//     the mean spacing, hence the rule in 2, doubles.
//
// The newest point may lag the job's latest progress by less than the
// spacing; readers add that progress as a last point (LossSeries' callers).
var lossPointLua = `
local function lossstep(v)
  local s = string.match(v or '', '^(%S+) ')
  return tonumber(s)
end
local function losspoint(id, value)
  local ok, p = pcall(cjson.decode, value)
  if not ok or type(p) ~= 'table' then return end
  local step, loss = tonumber(p['step']), tonumber(p['loss'])
  if not step or not loss or loss ~= loss then return end
  local key = jobkey(id) .. ':loss'
  while true do
    local last = lossstep(redis.call('LINDEX', key, -1))
    if not last or last < step then break end
    redis.call('RPOP', key)
  end
  local n = redis.call('LLEN', key)
  if n >= 2 then
    local first, last = lossstep(redis.call('LINDEX', key, 0)), lossstep(redis.call('LINDEX', key, -1))
    if first and last and (step - last) * (n - 1) < (last - first) then return end
  end
  redis.call('RPUSH', key, string.format('%d %.17g', step, loss))
  if n + 1 > LOSS_MAX then
    local all = redis.call('LRANGE', key, 0, -1)
    local keep = {}
    for i = 1, #all, 2 do keep[#keep + 1] = all[i] end
    redis.call('DEL', key)
    redis.call('RPUSH', key, unpack(keep))
  end
end
`

// AddLossPoint is the loss series' rule (lossPointLua) in Go: series with
// the progress update (step, loss) applied.
func AddLossPoint(series []jobtype.LossPoint, step int, loss float64) []jobtype.LossPoint {
	if loss != loss { // NaN
		return series
	}
	for len(series) > 0 && series[len(series)-1].Step() >= step {
		series = series[:len(series)-1]
	}
	if n := len(series); n >= 2 {
		first, last := series[0].Step(), series[n-1].Step()
		if (step-last)*(n-1) < last-first {
			return series
		}
	}
	series = append(series, jobtype.LossPoint{float64(step), loss})
	if len(series) > LossSeriesMax {
		keep := series[:0]
		for i := 0; i < len(series); i += 2 {
			keep = append(keep, series[i])
		}
		series = keep
	}
	return series
}

// LossSeries reads the loss series of the jobs ids in one pipeline (one
// LRANGE each): ids without one (no progress yet) are absent. Entries it
// cannot read are skipped.
func (s *Store) LossSeries(ctx context.Context, ids []string) (map[string][]jobtype.LossPoint, error) {
	out := make(map[string][]jobtype.LossPoint, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	for _, id := range ids {
		pipe.LRange(ctx, s.key("job", id, "loss"), 0, -1)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return nil, fmt.Errorf("jobstore: loss series of %d jobs: %w", len(ids), err)
	}
	for i, c := range cmds {
		vals, _ := c.(interface{ Val() []string })
		if vals == nil {
			continue
		}
		var pts []jobtype.LossPoint
		for _, v := range vals.Val() {
			if p, ok := parseLossPoint(v); ok {
				pts = append(pts, p)
			}
		}
		if len(pts) > 0 {
			out[ids[i]] = pts
		}
	}
	return out, nil
}

// parseLossPoint reads one "step loss" entry.
func parseLossPoint(v string) (jobtype.LossPoint, bool) {
	a, b, ok := strings.Cut(v, " ")
	if !ok {
		return jobtype.LossPoint{}, false
	}
	step, err1 := strconv.ParseFloat(a, 64)
	loss, err2 := strconv.ParseFloat(b, 64)
	if err1 != nil || err2 != nil {
		return jobtype.LossPoint{}, false
	}
	return jobtype.LossPoint{step, loss}, true
}
