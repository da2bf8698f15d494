package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/poolstate"
)

// setRouteScript writes a job's route and held reason, on a queued job at
// the attempt the route was decided for: a routing decision is for one
// queued attempt, so a job that was dispatched, cancelled or deleted, or
// moved to another attempt, since it was read gets none. With a
// reservation it reserves the job's budgets in the same call
// (reserve_or_hold: a limit that would be passed holds the job instead).
// With ledger keys it also appends the decision's records, in the
// same call: first the job is checked (nothing is written for a missing or
// ended job), then the ledger's head (ledger_check: a head that moved is
// answered, nothing written), then the route is written and the records
// appended. Redis refuses a script's first write at maxmemory and lets one
// that has written finish, so the route and its records land together or
// not at all.
//
//	KEYS[1]  ledger stream  (optional, with KEYS[2])
//	KEYS[2]  ledger head
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  route JSON
//	ARGV[4]  held reason ('' not held)
//	ARGV[5]  attempt the route is for
//	ARGV[6]  the budget month (a held job is stamped with its epoch)
//	ARGV[7]  the number r of reservation entries (0: reserve nothing)
//	ARGV[8…] the r entries (budgetArgs)
//	with KEYS, from L = 8 + r:
//	ARGV[L]    head seq the records were sealed on
//	ARGV[L+1]  head mac
//	ARGV[L+2]  record count
//	ARGV[L+3…] the records' ledger.EntryArgs
//
// Returns the job reply: DONE, OVER_BUDGET (stored held; a fifth element
// is the held reason), CONFLICT (not queued, or at another attempt),
// NOT_FOUND; or a ledger_check reply.
var setRouteScript = redis.NewScript(luaCommon + ledger.LuaAppend + luaReserve + `
local id = ARGV[2]
local st = redis.call('HGET', jobkey(id), 'state')
if not st then return {NOT_FOUND, '', 0, 0} end
if st ~= 'queued' or redis.call('HGET', jobkey(id), 'attempt') ~= ARGV[5] then return reply(CONFLICT, id) end
local nb = tonumber(ARGV[7])
local L = 8 + nb
if #KEYS == 2 then
  local bad = ledger_check(KEYS[1], KEYS[2], ARGV[L], ARGV[L + 1])
  if bad then return bad end
end
-- The route's kind and backend as fields of their own too (tally.go).
local r = cjson.decode(ARGV[3])
local function str(v) if type(v) == 'string' then return v end return '' end
redis.call('HSET', jobkey(id), 'route', ARGV[3], 'held', ARGV[4], 'route_kind', str(r.kind), 'route_backend', str(r.backend))
if ARGV[4] ~= '' then redis.call('HSET', jobkey(id), 'held_epoch', budget_epoch(P, ARGV[6])) end
local over = reserve_or_hold(P, id, 8, nb)
if #KEYS == 2 then ledger_write(KEYS[1], KEYS[2], ARGV, L + 3, tonumber(ARGV[L + 2])) end
if over then
  local out = reply(OVER_BUDGET, id)
  out[5] = over
  return out
end
return reply(1, id)
`)

// SetRoute records a new routing decision (spill-over, retry, config
// reload) and the held reason ("" = not held) on a queued job at
// route.Attempt; on any other a ConflictError (it left the queue, or moved
// to another attempt, since it was read).
// A decision that has ledger records goes through SetRouteLogged instead.
func (s *Store) SetRoute(ctx context.Context, id string, route *jobtype.RouteInfo, held string) error {
	_, err := s.SetRouteLogged(ctx, nil, RouteUpdate{ID: id, Route: route, Held: held})
	return err
}

// setRouteWant is what a set route that lost asked for.
const setRouteWant = "set route needs the job queued at the attempt the route was decided for"

// RouteUpdate is a new routing decision for SetRouteLogged.
type RouteUpdate struct {
	// ID is the job's.
	ID    string
	Route *jobtype.RouteInfo
	// Held says why the job is held ("" = not held).
	Held string
	// Records builds the decision's ledger records numbered from seq, the
	// first record's (the decision's) sequence number, which also becomes
	// the stored route's LedgerSeq; it is called again when another
	// appender moved the ledger's head first. Nil: no records.
	Records func(seq int64) []ledger.Record
	// Budget is reserved in the same script (nil: none); when a limit
	// would be passed the job is stored held instead (RouteSet.Held).
	Budget *BudgetReservation
}

// RouteSet is what SetRouteLogged stored: the route, and why the job is
// held ("" not held).
type RouteSet struct {
	Route *jobtype.RouteInfo
	Held  string
}

// SetRouteLogged is SetRoute that appends the decision's ledger records
// (u.Records) to l in the same script that writes the route: both are
// stored or neither (Redis at maxmemory, a lost connection, a crash between
// them cannot leave a decision whose route was never stored). A job that is
// gone (ErrNotFound), or is no longer queued at u.Route.Attempt (a
// ConflictError), gets neither route nor records. It returns the route as
// stored. With no ledger, or no records, it appends nothing.
func (s *Store) SetRouteLogged(ctx context.Context, l *ledger.Ledger, u RouteUpdate) (RouteSet, error) {
	var seq int64
	var mac string
	if l != nil && u.Records != nil {
		var err error
		if seq, mac, err = l.Head(ctx); err != nil {
			return RouteSet{}, fmt.Errorf("jobstore: set route %s: %w", u.ID, err)
		}
	}
	for {
		ri := *u.Route
		var keys []string
		var tail []any
		if l != nil && u.Records != nil {
			if recs := u.Records(seq + 1); len(recs) > 0 {
				sealed, err := l.Seal(seq, mac, recs)
				if err != nil {
					return RouteSet{}, fmt.Errorf("jobstore: set route %s: %w", u.ID, err)
				}
				ri.LedgerSeq = sealed[0].Seq
				keys = l.Keys()
				tail = append([]any{strconv.FormatInt(seq, 10), mac, len(sealed)}, ledger.EntryArgs(sealed)...)
			}
		}
		budget := budgetArgs(u.Budget, &ri)
		args := append([]any{s.cfg.Prefix, u.ID, mustJSON(&ri), u.Held, u.Route.Attempt, Month(s.now()), len(budget)}, budget...)
		v, err := setRouteScript.Run(ctx, s.rdb, keys, append(args, tail...)...).Slice()
		if err != nil {
			return RouteSet{}, fmt.Errorf("jobstore: set route %s: %w", u.ID, err)
		}
		if ledger.IsCheckReply(v) {
			if seq, mac, err = l.CheckReply(v); err != nil {
				return RouteSet{}, fmt.Errorf("jobstore: set route %s: %w", u.ID, err)
			}
			if err := ctx.Err(); err != nil {
				return RouteSet{}, fmt.Errorf("jobstore: set route %s: %w", u.ID, err)
			}
			continue
		}
		if keys != nil {
			l.Appended()
		}
		return s.routeSet(u, &ri, v)
	}
}

// routeSet reads set route's reply v to u, whose route was stored as ri.
func (s *Store) routeSet(u RouteUpdate, ri *jobtype.RouteInfo, v []any) (RouteSet, error) {
	r, err := decodeResult(v)
	if err != nil {
		return RouteSet{}, fmt.Errorf("jobstore: set route %s: %w", u.ID, err)
	}
	switch r.code {
	case codeDone:
		return RouteSet{Route: ri, Held: u.Held}, nil
	case codeOverBudget:
		why, _ := v[4].(string)
		return RouteSet{Route: heldRoute(u.Budget, ri), Held: why}, nil
	case codeNotFound:
		return RouteSet{}, fmt.Errorf("jobstore: set route %s: %w", u.ID, ErrNotFound)
	default:
		return RouteSet{}, &ConflictError{ID: u.ID, State: r.state, Attempt: r.attempt, Want: setRouteWant}
	}
}

// stepKey is the stats hash field of a base model on a GPU model.
func stepKey(baseModel, gpuModel string) string {
	return strings.ToLower(baseModel) + "|" + strings.ToLower(gpuModel)
}

var stepTimeScript = redis.NewScript(`
local k, f, x = ARGV[1], ARGV[2], tonumber(ARGV[3])
local cur = tonumber(redis.call('HGET', k, f) or '0')
if cur > 0 then x = 0.7 * cur + 0.3 * x end
redis.call('HSET', k, f, string.format('%.6f', x))
return 1
`)

// RecordStepTime folds secondsPerStep, measured on a finished job, into the
// learned seconds per step of baseModel on gpuModel ("cpu" for CPU jobs):
// an exponential moving average (weight 0.3 for the newest).
func (s *Store) RecordStepTime(ctx context.Context, baseModel, gpuModel string, secondsPerStep float64) error {
	if secondsPerStep <= 0 {
		return nil
	}
	err := stepTimeScript.Run(ctx, s.rdb, nil, s.key("stats", "seconds_per_step"), stepKey(baseModel, gpuModel),
		strconv.FormatFloat(secondsPerStep, 'f', 6, 64)).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("jobstore: record step time: %w", err)
	}
	return nil
}

// RecordStartRatio keeps a local start's wait over the wait estimated at
// its submit (policy.StartRatio): the newest poolstate.StartRatiosKept are kept,
// and routing reads them to judge its local wait estimates (ReadRouting).
func (s *Store) RecordStartRatio(ctx context.Context, ratio float64) error {
	if math.IsNaN(ratio) || math.IsInf(ratio, 0) || ratio < 0 {
		return fmt.Errorf("jobstore: record start ratio: %v is not a ratio", ratio)
	}
	key := s.key("stats", "start_ratios")
	pipe := s.rdb.TxPipeline()
	pipe.LPush(ctx, key, strconv.FormatFloat(ratio, 'g', 6, 64))
	pipe.LTrim(ctx, key, 0, poolstate.StartRatiosKept-1)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("jobstore: record start ratio: %w", err)
	}
	return nil
}

// startRatiosOf decodes the start ratios' list, sorted.
func startRatiosOf(vs []string) []float64 {
	var out []float64 // none: nil
	for _, v := range vs {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && !math.IsInf(f, 0) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// StepTimes returns the learned seconds per step, keyed "base|gpu model".
func (s *Store) StepTimes(ctx context.Context) (map[string]float64, error) {
	m, err := s.rdb.HGetAll(ctx, s.key("stats", "seconds_per_step")).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: step times: %w", err)
	}
	return stepTimesOf(m), nil
}

// stepTimesOf decodes the seconds-per-step hash.
func stepTimesOf(m map[string]string) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[k] = f
		}
	}
	return out
}

// PoolPressure is a local pool's queue pressure (poolstate.PoolPressure).
type PoolPressure = poolstate.PoolPressure

// JoinWait is the wait of a new job (poolstate.JoinWait).
type JoinWait = poolstate.JoinWait

// CapacityNode is one node's GPUs by model and memory (poolstate.CapacityNode).
type CapacityNode = poolstate.CapacityNode

// CapacityGPU is a count of one GPU model with one memory size (poolstate.CapacityGPU).
type CapacityGPU = poolstate.CapacityGPU

// SetPoolPressure stores pool's pressure (written every placement round).
func (s *Store) SetPoolPressure(ctx context.Context, pool string, p PoolPressure) error {
	if err := s.rdb.Set(ctx, s.key("pool", pool, "pressure"), mustJSON(p), 0).Err(); err != nil {
		return fmt.Errorf("jobstore: pool pressure %s: %w", pool, err)
	}
	return nil
}

// PoolPressureOf reads pool's last pressure (zero when none yet).
func (s *Store) PoolPressureOf(ctx context.Context, pool string) (PoolPressure, error) {
	v, err := s.rdb.Get(ctx, s.key("pool", pool, "pressure")).Result()
	return pressureOf(pool, v, err)
}

// pressureOf decodes pool's pressure as read (v, err of its GET).
func pressureOf(pool, v string, err error) (PoolPressure, error) {
	var p PoolPressure
	if errors.Is(err, redis.Nil) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("jobstore: pool pressure %s: %w", pool, err)
	}
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return p, fmt.Errorf("jobstore: pool pressure %s: %w", pool, err)
	}
	return p, nil
}

// RoutingQuery names what ReadRouting reads.
type RoutingQuery struct {
	Pool   string   // the local pool whose pressure is read ("local")
	Month  string   // the budget month (Month)
	Scopes []string // the budget scopes whose spend is read
	Nodes  bool     // the live nodes too (Nodes)
}

// RoutingReads is what a routing decision reads of the store.
type RoutingReads struct {
	Nodes     []NodeStatus // when asked (RoutingQuery.Nodes)
	Pressure  PoolPressure
	Spends    map[string]Spend
	StepTimes map[string]float64
	// StartRatios are the recent start ratios, sorted (RecordStartRatio).
	StartRatios []float64
}

// ReadRouting reads a routing decision's inputs in one pipeline: the
// pool's pressure, the scopes' spends, the learned step times and, when
// asked, the nodes set; the live nodes' records then take a second round
// trip (Nodes). What PoolPressureOf, Spends, StepTimes and Nodes read one
// call each, a submit reads in two round trips instead of five.
func (s *Store) ReadRouting(ctx context.Context, q RoutingQuery) (RoutingReads, error) {
	var out RoutingReads
	pipe := s.rdb.Pipeline()
	var names *redis.StringSliceCmd
	if q.Nodes {
		names = pipe.SMembers(ctx, s.key("nodes"))
	}
	pc := pipe.Get(ctx, s.key("pool", q.Pool, "pressure"))
	sc := s.spendCmds(ctx, pipe, q.Month, q.Scopes)
	st := pipe.HGetAll(ctx, s.key("stats", "seconds_per_step"))
	sr := pipe.LRange(ctx, s.key("stats", "start_ratios"), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return out, fmt.Errorf("jobstore: routing reads: %w", err)
	}
	var err error
	if out.Pressure, err = pressureOf(q.Pool, pc.Val(), pc.Err()); err != nil {
		return out, err
	}
	out.Spends, out.StepTimes, out.StartRatios = spendsOf(q.Scopes, sc), stepTimesOf(st.Val()), startRatiosOf(sr.Val())
	if names != nil {
		if out.Nodes, err = s.nodesNamed(ctx, names.Val()); err != nil {
			return out, err
		}
	}
	return out, nil
}
