package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

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

var reserveScript = redis.NewScript(`
local P, id, month, amount = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local jk = P .. 'job:' .. id
if redis.call('EXISTS', jk) == 0 then return {-1, ''} end
if tonumber(redis.call('HGET', jk, 'budget_reserved_usd') or '0') > 0 then return {2, ''} end
local n = (#ARGV - 4) / 2
for i = 0, n - 1 do
  local scope, limit = ARGV[5 + 2 * i], tonumber(ARGV[6 + 2 * i])
  if limit > 0 then
    local k = P .. 'budget:' .. scope .. ':' .. month
    local v = redis.call('HMGET', k, 'spent', 'reserved')
    if tonumber(v[1] or '0') + tonumber(v[2] or '0') + amount > limit then return {0, scope} end
  end
end
local scopes = {}
for i = 0, n - 1 do
  local scope = ARGV[5 + 2 * i]
  redis.call('HINCRBYFLOAT', P .. 'budget:' .. scope .. ':' .. month, 'reserved', amount)
  scopes[#scopes + 1] = scope
end
redis.call('HSET', jk, 'budget_reserved_usd', ARGV[4], 'budget_month', month, 'budget_scopes', table.concat(scopes, ' '))
redis.call('SADD', P .. 'budget:open', id)
return {1, ''}
`)

var settleScript = redis.NewScript(`
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
redis.call('HSET', jk, 'budget_reserved_usd', '0', 'cost_usd', ARGV[3], 'cost_settled_usd', ARGV[3])
return 1
`)

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
		scope, _ := res[1].(string)
		return fmt.Errorf("jobstore: reserve $%.2f for %s: %s's %s budget: %w", amount, id, scope, month, ErrOverBudget)
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
	cmds := make([]*redis.SliceCmd, len(scopes))
	for i, sc := range scopes {
		cmds[i] = pipe.HMGet(ctx, s.key("budget", sc, month), "spent", "reserved")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: spends: %w", err)
	}
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
	return out, nil
}
