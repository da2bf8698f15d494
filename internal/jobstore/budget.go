package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/poolstate"
)

// Budgets: per scope ("backend:<name>", "team:<name>") and calendar month
// (UTC, "2026-12"), a hash budget:<scope>:<month> {spent, reserved} in USD.
// A job's estimated cost is reserved at admission, against every scope's
// limit at once (one script: all or none), and settled with the actual
// cost when it ends. The job's hash remembers what it reserved.

// ErrOverBudget is returned by Reserve when a scope's limit would be passed;
// the error names the scope.
var ErrOverBudget = errors.New("over budget")

// BudgetScope is one budget a reservation counts against. Limit ≤ 0: no
// limit (the spend is still counted).
type BudgetScope struct {
	Scope string  // "backend:aws-eu", "team:ml-research"
	Limit float64 // USD per month
}

// Spend is one scope's month (poolstate.Spend).
type Spend = poolstate.Spend

// Month is the budget month of t: "2006-01" in UTC.
func Month(t time.Time) string { return t.UTC().Format("2006-01") }

// luaReserve defines reserve_budget for the scripts that reserve a job's
// budgets: Reserve's, and create's and set route's, which reserve in the
// same call that stores the job or its route (a job is never stored routed
// without its reservation, nor reserved without being stored).
const luaReserve = `
-- argscopes are n scope, limit pairs of ARGV from i on; strscopes the
-- pairs of a "scope limit scope limit" string (a trial's reserve_scopes).
local function argscopes(i, n)
  local t = {}
  for k = 0, n - 1 do t[#t + 1] = {ARGV[i + 2 * k], tonumber(ARGV[i + 2 * k + 1])} end
  return t
end
local function strscopes(s)
  local w, t = {}, {}
  for x in string.gmatch(s or '', '%S+') do w[#w + 1] = x end
  for k = 1, #w - 1, 2 do t[#t + 1] = {w[k], tonumber(w[k + 1])} end
  return t
end
-- reserve_budget reserves usd (a number's text) for job id in month
-- against scopes ({scope, limit} pairs; limit <= 0: none), all or none.
-- It returns false when reserved (or the job holds a reservation
-- already), else why not: the first scope whose limit it would pass, with
-- what is left of it ("$15.00 would pass team:ml's 2026-12 budget ($3.00
-- of $100.00 left)").
local function reserve_budget(P, id, month, usd, scopes)
  local jk = P .. 'job:' .. id
  if tonumber(redis.call('HGET', jk, 'budget_reserved_usd') or '0') > 0 then return false end
  local amount = tonumber(usd)
  for _, sc in ipairs(scopes) do
    if sc[2] > 0 then
      local v = redis.call('HMGET', P .. 'budget:' .. sc[1] .. ':' .. month, 'spent', 'reserved')
      local used = tonumber(v[1] or '0') + tonumber(v[2] or '0')
      if used + amount > sc[2] + 1e-9 then
        return string.format("$%.2f would pass %s's %s budget ($%.2f of $%.2f left)", amount, sc[1], month, math.max(sc[2] - used, 0), sc[2])
      end
    end
  end
  local names = {}
  for _, sc in ipairs(scopes) do
    redis.call('HINCRBYFLOAT', P .. 'budget:' .. sc[1] .. ':' .. month, 'reserved', amount)
    names[#names + 1] = sc[1]
  end
  redis.call('HSET', jk, 'budget_reserved_usd', usd, 'budget_month', month, 'budget_scopes', table.concat(names, ' '))
  redis.call('SADD', P .. 'budget:open', id)
  return false
end
-- budget_epoch is month's budget epoch ("2026-12:7"): how many times
-- money was freed in it (a settlement). A job held is stamped with it
-- (held_epoch) and decided again when it moves on (policy.DecideRound).
local function budget_epoch(P, month)
  return month .. ':' .. (redis.call('GET', P .. 'budget:epoch:' .. month) or '0')
end
-- reserve_or_hold reserves a stored job's budgets from the ARGV of a
-- BudgetReservation (budgetArgs) at b; when a limit would be passed the
-- job is stored held instead: the held route (its reasons say why) and
-- the held reason. It returns that reason, or false.
local function reserve_or_hold(P, id, b, nb)
  if nb == 0 then return false end
  local why = reserve_budget(P, id, ARGV[b + 1], ARGV[b], argscopes(b + 4, (nb - 4) / 2))
  if why then
    why = 'budget reservation refused: ' .. why
    redis.call('HSET', P .. 'job:' .. id, 'route', ARGV[b + 2], 'held', why, 'held_epoch', budget_epoch(P, ARGV[b + 1]))
  end
  return why
end
`

var reserveScript = redis.NewScript(luaReserve + `
local P, id = ARGV[1], ARGV[2]
if redis.call('EXISTS', P .. 'job:' .. id) == 0 then return {-1, ''} end
if tonumber(redis.call('HGET', P .. 'job:' .. id, 'budget_reserved_usd') or '0') > 0 then return {2, ''} end
local why = reserve_budget(P, id, ARGV[3], ARGV[4], argscopes(5, (#ARGV - 4) / 2))
if why then return {0, why} end
return {1, ''}
`)

var settleScript = redis.NewScript(`
local COSTTOTAL = '` + costTotalKey + `'
local P, id, actual = ARGV[1], ARGV[2], tonumber(ARGV[3])
local jk = P .. 'job:' .. id
local v = redis.call('HMGET', jk, 'budget_reserved_usd', 'budget_month', 'budget_scopes')
if redis.call('SREM', P .. 'budget:open', id) == 0 then return 0 end
local r = tonumber(v[1] or '0')
if not v[2] or v[2] == '' then return 0 end
-- actual is the job's whole cost so far; what an earlier settlement (before
-- a retry) counted is not counted again.
local before = tonumber(redis.call('HGET', jk, 'cost_settled_usd') or '0') or 0
local delta = actual - before
for scope in string.gmatch(v[3] or '', '%S+') do
  local k = P .. 'budget:' .. scope .. ':' .. v[2]
  redis.call('HINCRBYFLOAT', k, 'reserved', -r)
  if delta > 0 then redis.call('HINCRBYFLOAT', k, 'spent', delta) end
end
-- The same delta, once, to the all-time total by backend and team
-- (lathe_cost_dollars_total; endstats.go).
if delta > 0 then
  local o = redis.call('HMGET', jk, 'backend', 'route_backend', 'team')
  local backend = o[1] or ''
  if backend == '' then backend = o[2] or '' end
  redis.call('HINCRBYFLOAT', P .. COSTTOTAL, cjson.encode({backend, o[3] or ''}), delta)
end
-- Money freed in the month: jobs held waiting for it are decided again.
redis.call('INCR', P .. 'budget:epoch:' .. v[2])
redis.call('HSET', jk, 'budget_reserved_usd', '0', 'cost_usd', ARGV[3], 'cost_settled_usd', ARGV[3])
return 1
`)

// BudgetReservation is a job's estimated cost, reserved against its budgets
// (every scope's monthly limit, all or none) by the script that stores the
// job (NewJob.Budget) or its new route (RouteUpdate.Budget). A job already
// holding a reservation keeps it. When a limit would be passed (another
// admission reserved first, after the decision read the spend), the job is
// stored all the same, held: its route waiting, with the reason.
type BudgetReservation struct {
	Month  string // Month(now)
	USD    float64
	Scopes []BudgetScope
}

// budgetArgs are a reservation's script ARGV for a job whose route is
// route: usd, month, the held route, an unused slot (kept so the layout
// stays fixed), then the scopes; none for a nil or zero reservation.
func budgetArgs(b *BudgetReservation, route *jobtype.RouteInfo) []any {
	if b == nil || b.USD <= 0 || len(b.Scopes) == 0 {
		return nil
	}
	args := []any{strconv.FormatFloat(b.USD, 'f', 6, 64), b.Month, mustJSON(heldRoute(b, route)), ""}
	for _, sc := range b.Scopes {
		args = append(args, sc.Scope, strconv.FormatFloat(sc.Limit, 'f', 6, 64))
	}
	return args
}

// heldRoute is route as the store holds it after reserve_or_hold refused
// its reservation b: waiting, with the reason.
func heldRoute(b *BudgetReservation, route *jobtype.RouteInfo) *jobtype.RouteInfo {
	held := jobtype.RouteInfo{}
	if route != nil {
		held = *route
	}
	held.Waiting = true
	held.Reasons = append(append([]string(nil), held.Reasons...),
		fmt.Sprintf("budget: the reservation of $%.2f was refused: another admission reserved the budget first", b.USD))
	return &held
}

// Reserve reserves amount USD for job id in month against every scope, all
// or none: ErrOverBudget (naming the scope) when one limit would be passed.
// A job holds one reservation at a time; reserving again is a no-op.
func (s *Store) Reserve(ctx context.Context, id, month string, amount float64, scopes []BudgetScope) error {
	args := []any{s.cfg.Prefix, id, month, strconv.FormatFloat(amount, 'f', 6, 64)}
	for _, sc := range scopes {
		args = append(args, sc.Scope, strconv.FormatFloat(sc.Limit, 'f', 6, 64))
	}
	res, err := reserveScript.Run(ctx, s.rdb, nil, args...).Slice()
	if err != nil {
		return fmt.Errorf("jobstore: reserve budget for %s: %w", id, err)
	}
	code, _ := res[0].(int64)
	switch code {
	case 1, 2:
		return nil
	case -1:
		return fmt.Errorf("jobstore: reserve budget for %s: %w", id, ErrNotFound)
	default:
		why, _ := res[1].(string)
		return fmt.Errorf("jobstore: reserve for %s: %s: %w", id, why, ErrOverBudget)
	}
}

// Settle ends job id's reservation: the reserved amount is released and
// actual, the job's whole cost so far, is counted as spent in the same
// scopes and month, less what an earlier settlement of the job (before a
// retry) already counted. Safe to call
// twice (the second finds nothing reserved and spends nothing).
func (s *Store) Settle(ctx context.Context, id string, actual float64) error {
	if err := settleScript.Run(ctx, s.rdb, nil, s.cfg.Prefix, id, strconv.FormatFloat(actual, 'f', 6, 64)).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("jobstore: settle budget of %s: %w", id, err)
	}
	return nil
}

// BudgetEpoch is month's budget epoch ("2026-12:7"): it moves on each
// time a settlement frees money in the month. A held job carries the
// epoch it was held in (Job.HeldEpoch); the placer decides it again when
// the epoch moved on (a settlement, a new month).
func (s *Store) BudgetEpoch(ctx context.Context, month string) (string, error) {
	n, err := s.rdb.Get(ctx, s.key("budget", "epoch", month)).Result()
	if errors.Is(err, redis.Nil) {
		n, err = "0", nil
	}
	if err != nil {
		return "", fmt.Errorf("jobstore: budget epoch: %w", err)
	}
	return month + ":" + n, nil
}

// OpenReservations lists the jobs holding a budget reservation.
func (s *Store) OpenReservations(ctx context.Context) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.key("budget", "open")).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: open reservations: %w", err)
	}
	return ids, nil
}

// Spends reads the month's spend of each scope.
func (s *Store) Spends(ctx context.Context, month string, scopes []string) (map[string]Spend, error) {
	pipe := s.rdb.Pipeline()
	cmds := s.spendCmds(ctx, pipe, month, scopes)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: spends: %w", err)
	}
	return spendsOf(scopes, cmds), nil
}

// spendCmds queues on pipe the reads of each scope's spend in month.
func (s *Store) spendCmds(ctx context.Context, pipe redis.Pipeliner, month string, scopes []string) []*redis.SliceCmd {
	cmds := make([]*redis.SliceCmd, len(scopes))
	for i, sc := range scopes {
		cmds[i] = pipe.HMGet(ctx, s.key("budget", sc, month), "spent", "reserved")
	}
	return cmds
}

// spendsOf decodes the replies of spendCmds, by scope.
func spendsOf(scopes []string, cmds []*redis.SliceCmd) map[string]Spend {
	out := make(map[string]Spend, len(scopes))
	for i, sc := range scopes {
		v := cmds[i].Val()
		var sp Spend
		if len(v) == 2 {
			if x, ok := v[0].(string); ok {
				sp.SpentUSD, _ = strconv.ParseFloat(x, 64)
			}
			if x, ok := v[1].(string); ok {
				sp.ReservedUSD, _ = strconv.ParseFloat(x, 64)
			}
		}
		out[sc] = sp
	}
	return out
}

// WaitingForMoney lists, of the queued jobs, those not admitted that a
// budget may be keeping out: held (a reservation refused, or no backend
// feasible), or a sweep's trial waiting with a gate, and holding no
// reservation. It reads three fields of each queued job (pipelined), not
// the whole records.
func (s *Store) WaitingForMoney(ctx context.Context) ([]string, error) {
	ids, err := s.IDsInState(ctx, jobtype.StateQueued, 1<<30)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, s.key("job", id), "held", "gate", "budget_reserved_usd")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: jobs waiting for money: %w", err)
	}
	var out []string
	for i, c := range cmds {
		v := c.Val()
		if len(v) != 3 {
			continue
		}
		held, _ := v[0].(string)
		gate, _ := v[1].(string)
		r, _ := v[2].(string)
		if reserved, _ := strconv.ParseFloat(r, 64); (held != "" || gate != "") && reserved <= 0 {
			out = append(out, ids[i])
		}
	}
	return out, nil
}

// QueuedCount is how many jobs are queued (admitted or not).
func (s *Store) QueuedCount(ctx context.Context) (int64, error) {
	n, err := s.rdb.ZCard(ctx, s.key("state", string(jobtype.StateQueued))).Result()
	if err != nil {
		return 0, fmt.Errorf("jobstore: queued count: %w", err)
	}
	return n, nil
}
