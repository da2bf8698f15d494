package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// A gang's attempt (a job of resources.nodes > 1) is one attempt of one
// job record, run by one rank per node. Its record carries, besides the
// usual fields (node and gpus are rank 0's):
//
//	gang               {"attempt":a,"ranks":[{"node":…,"gpus":[…]},…]} (rank = index)
//	gang_addr, gang_port  the rendezvous, written by rank 0's claim
//	rank:<r>:state     dispatched | running | succeeded | cancelled
//	rank:<r>:inc       the worker incarnation that claimed rank r
//	rank:<r>:lease     rank r's lease, ms
//
// The attempt's lease_until is the earliest lease of its ranks still
// dispatched or running, so the reaper (which reads lease_until) ends the
// whole attempt when any rank's lease lapses. Any end other than success
// (Finish, Requeue, Reap) is the attempt's end, for every rank: release
// frees every rank's GPUs, and the other ranks' next renewal is refused,
// which stops their trainers.

// luaGang is what the gang scripts share: gangOf decodes the record's gang
// (nil unless it is attempt want's), gangLease recomputes lease_until.
var luaGang = `
local function gangOf(id, want)
  local raw = redis.call('HGET', jobkey(id), 'gang')
  if not raw or raw == '' then return nil end
  local ok, g = pcall(cjson.decode, raw)
  if not ok or type(g) ~= 'table' or tonumber(g['attempt']) ~= want or type(g['ranks']) ~= 'table' then return nil end
  return g
end
local function rankf(r, f) return 'rank:' .. r .. ':' .. f end
local function gangLease(id, g)
  local min = nil
  for r = 0, #g['ranks'] - 1 do
    local v = redis.call('HMGET', jobkey(id), rankf(r, 'state'), rankf(r, 'lease'))
    local l = tonumber(v[2] or '')
    if (v[1] == 'dispatched' or v[1] == 'running') and l and (not min or l < min) then min = l end
  end
  if min then redis.call('HSET', jobkey(id), 'lease_until', min) end
end
`

// gangDispatchScript reserves every rank's GPUs, or none, and moves a
// queued job to dispatched as a gang.
//
//	ARGV[3]  attempt
//	ARGV[4]  ranks, JSON [{"node":…,"gpus":[…]},…] (rank = index)
//	ARGV[5]  now, ms
//	ARGV[6]  event stream maxlen
//	ARGV[7]  state event data
//	ARGV[8]  leader fence ('' none)
//
// Returns the job reply: DONE; CONFLICT (not queued at that attempt, a
// cancel was asked, or held); NODE_FULL (a GPU of some rank is held);
// FENCED; NOT_FOUND.
var gangDispatchScript = redis.NewScript(luaCommon + `
local id, want, ranksjson, now, maxlen, data = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if fenced(ARGV[8] or '') then return {FENCED, 'fenced', 0, 0} end
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested', 'held')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if cur[1] ~= 'queued' or tonumber(cur[2]) ~= want or cur[3] == '1' then return reply(CONFLICT, id) end
if cur[4] and cur[4] ~= '' then return reply(CONFLICT, id) end
local ranks = cjson.decode(ranksjson)
for _, m in ipairs(ranks) do
  for _, v in ipairs(redis.call('HVALS', P .. 'node:' .. m['node'] .. ':reserved')) do
    local ok, r = pcall(cjson.decode, v)
    if ok and type(r) == 'table' and type(r['g']) == 'table' then
      for _, g in ipairs(r['g']) do
        for _, a in ipairs(m['gpus']) do
          if tonumber(g) == tonumber(a) then return {NODE_FULL, 'full', want, 0} end
        end
      end
    end
  end
end
local fields = {}
for r, m in ipairs(ranks) do
  redis.call('HSET', P .. 'node:' .. m['node'] .. ':reserved', id, '{"a":' .. want .. ',"g":' .. cjson.encode(m['gpus']) .. '}')
  fields[#fields+1] = 'rank:' .. (r - 1) .. ':state'; fields[#fields+1] = 'dispatched'
  fields[#fields+1] = 'rank:' .. (r - 1) .. ':inc'; fields[#fields+1] = ''
  fields[#fields+1] = 'rank:' .. (r - 1) .. ':lease'; fields[#fields+1] = ''
end
redis.call('ZREM', P .. 'pending', id)
setstate(id, 'queued', 'dispatched', now)
redis.call('HSET', jobkey(id), 'node', ranks[1]['node'], 'backend', 'local', 'gpus', cjson.encode(ranks[1]['gpus']), 'dispatched_at', now,
  'gang', '{"attempt":' .. want .. ',"ranks":' .. ranksjson .. '}', 'gang_addr', '', 'gang_port', '', unpack(fields))
addevent(id, maxlen, 'state', want, now, data)
return reply(DONE, id)
`)

// gangClaimScript lets rank r's worker take its rank. The attempt becomes
// running when rank 0 claims (it records the rendezvous address and port);
// from then every rank not yet claimed has one lease to claim, or the
// reaper ends the attempt. A cancel asked before rank 0 claimed ends the
// attempt cancelled; after, the claim only marks the rank cancelled (the
// running ranks see the cancel on renewal).
//
//	ARGV[3]  attempt
//	ARGV[4]  rank
//	ARGV[5]  node
//	ARGV[6]  incarnation
//	ARGV[7]  now, ms
//	ARGV[8]  event stream maxlen
//	ARGV[9]  state event data (dispatched → running)
//	ARGV[10] lease, ms
//	ARGV[11] rendezvous address (rank 0)
//	ARGV[12] rendezvous port (rank 0)
//
// Returns the job reply: DONE; CLAIM_CANCELLED; CONFLICT (stale); NOT_FOUND.
var gangClaimScript = redis.NewScript(luaCommon + luaGang + `
local id, want, rank, node, inc, now, maxlen, rdata, lease = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9], tonumber(ARGV[10])
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested', rankf(rank, 'state'))
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
local state = cur[1]
if (state ~= 'dispatched' and state ~= 'running') or tonumber(cur[2]) ~= want or cur[4] ~= 'dispatched' then return reply(CONFLICT, id) end
local g = gangOf(id, want)
if not g or not g['ranks'][rank + 1] or g['ranks'][rank + 1]['node'] ~= node then return reply(CONFLICT, id) end
if cur[3] == '1' then
  redis.call('HSET', jobkey(id), rankf(rank, 'state'), 'cancelled')
  if state == 'dispatched' and rank == 0 then
    release(id)
    local ended = endasked(id, 'dispatched', want, now, maxlen, '')
    return {CLAIM_CANCELLED, ended, want, 1}
  end
  gangLease(id, g)
  return {CLAIM_CANCELLED, state, want, 1}
end
redis.call('HSET', jobkey(id), rankf(rank, 'state'), 'running', rankf(rank, 'inc'), inc, rankf(rank, 'lease'), now + lease)
if rank == 0 then
  redis.call('HSET', jobkey(id), 'gang_addr', ARGV[11], 'gang_port', ARGV[12], 'incarnation', inc, 'started_at', now)
  for r = 1, #g['ranks'] - 1 do
    if redis.call('HGET', jobkey(id), rankf(r, 'state')) == 'dispatched' then redis.call('HSET', jobkey(id), rankf(r, 'lease'), now + lease) end
  end
  setstate(id, 'dispatched', 'running', now)
  addevent(id, maxlen, 'state', want, now, rdata)
end
gangLease(id, g)
return reply(DONE, id)
`)

// gangRenewScript extends rank r's lease while the attempt is current.
//
//	ARGV[3]  attempt
//	ARGV[4]  rank
//	ARGV[5]  incarnation
//	ARGV[6]  now, ms
//	ARGV[7]  lease, ms
//
// Returns the job reply: DONE; PREEMPT_ASKED; CONFLICT (the attempt ended
// or moved on, or the rank is not held by incarnation); NOT_FOUND.
var gangRenewScript = redis.NewScript(luaCommon + luaGang + `
local id, want, rank, inc, now, lease = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', rankf(rank, 'state'), rankf(rank, 'inc'), 'preempt_requested')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if (cur[1] ~= 'running' and cur[1] ~= 'dispatched') or tonumber(cur[2]) ~= want or cur[3] ~= 'running' or cur[4] ~= inc then return reply(CONFLICT, id) end
local g = gangOf(id, want)
if not g then return reply(CONFLICT, id) end
redis.call('HSET', jobkey(id), rankf(rank, 'lease'), now + lease)
gangLease(id, g)
if cur[5] and cur[5] ~= '' then return {PREEMPT_ASKED, cur[1], want, 0} end
return reply(DONE, id)
`)

// gangRankDoneScript records that rank r's trainer succeeded; when every
// rank has, the attempt ends succeeded (rank 0 brings the metrics and
// artifacts).
//
//	ARGV[3]  attempt
//	ARGV[4]  rank
//	ARGV[5]  incarnation
//	ARGV[6]  now, ms
//	ARGV[7]  event stream maxlen
//	ARGV[8]  state event data (running → succeeded)
//	ARGV[9]  metrics JSON ('' none)
//	ARGV[10] artifacts JSON ('' none)
//
// Returns the job reply: DONE (its state says whether the attempt ended);
// CONFLICT; NOT_FOUND.
var gangRankDoneScript = redis.NewScript(luaCommon + luaGang + `
local id, want, rank, inc, now, maxlen, data = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', rankf(rank, 'state'), rankf(rank, 'inc'))
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if cur[1] ~= 'running' or tonumber(cur[2]) ~= want or cur[3] ~= 'running' or cur[4] ~= inc then return reply(CONFLICT, id) end
local g = gangOf(id, want)
if not g then return reply(CONFLICT, id) end
redis.call('HSET', jobkey(id), rankf(rank, 'state'), 'succeeded')
if ARGV[9] ~= '' then redis.call('HSET', jobkey(id), 'metrics', ARGV[9]) end
if ARGV[10] ~= '' then redis.call('HSET', jobkey(id), 'artifacts', ARGV[10]) end
for r = 0, #g['ranks'] - 1 do
  if redis.call('HGET', jobkey(id), rankf(r, 'state')) ~= 'succeeded' then
    gangLease(id, g)
    return reply(DONE, id)
  end
end
release(id)
setstate(id, 'running', 'succeeded', now)
redis.call('HSET', jobkey(id), 'reason', '', 'error', '', 'finished_at', now)
addevent(id, maxlen, 'state', want, now, data)
return reply(DONE, id)
`)

// DispatchGang reserves every rank's GPUs (ranks[r] on its node) for
// attempt of job id and moves it queued → dispatched, all or nothing, in
// one script. Errors as Dispatch's: ErrNodeFull when a GPU of some rank is
// held, a *ConflictError when the job is not queued at that attempt (or a
// cancel was asked), ErrFenced for a stale leader.
func (s *Store) DispatchGang(ctx context.Context, id string, attempt int, ranks []jobtype.GangRank, fence Fence) error {
	if len(ranks) < 2 {
		return fmt.Errorf("jobstore: dispatch gang %s: %d ranks: a gang has at least 2", id, len(ranks))
	}
	seen := map[string]int{}
	for r, m := range ranks {
		if m.Node == "" || len(m.GPUs) == 0 || jobtype.IsCloudNode(m.Node) {
			return fmt.Errorf("jobstore: dispatch gang %s: rank %d (node %q, gpus %v): every rank needs a local node and GPUs", id, r, m.Node, m.GPUs)
		}
		if prev, ok := seen[m.Node]; ok {
			return fmt.Errorf("jobstore: dispatch gang %s: ranks %d and %d both on node %q: a gang's ranks are on distinct nodes", id, prev, r, m.Node)
		}
		seen[m.Node] = r
	}
	data := mustJSON(jobtype.StateChange{From: jobtype.StateQueued, To: jobtype.StateDispatched, Node: ranks[0].Node})
	r, err := s.run(ctx, "dispatch gang", id, gangDispatchScript, attempt, mustJSON(ranks), ms(s.now()), s.cfg.EventsMaxLen, data, string(fence))
	if err != nil {
		return err
	}
	switch r.code {
	case codeDone:
		return nil
	case codeFenced:
		return fmt.Errorf("jobstore: dispatch gang %s: %w", id, ErrFenced)
	case codeNodeFull:
		return fmt.Errorf("jobstore: dispatch gang %s: %w", id, ErrNodeFull)
	default:
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("dispatch gang needs queued attempt %d", attempt)}
	}
}

// RankClaim names one rank's claim (ClaimRank).
type RankClaim struct {
	ClaimParams
	Rank int
	// Addr and Port are the rendezvous (MASTER_ADDR, MASTER_PORT) that
	// rank 0 offers; ignored for the other ranks.
	Addr string
	Port int
}

// ClaimRank takes rank p.Rank of gang attempt p.Attempt for p.Node: the
// rank is running under p.Incarnation with a lease; rank 0's claim makes
// the attempt running and records the rendezvous. Outcomes as Claim's.
func (s *Store) ClaimRank(ctx context.Context, p RankClaim) (ClaimOutcome, error) {
	rdata := mustJSON(jobtype.StateChange{From: jobtype.StateDispatched, To: jobtype.StateRunning, Node: p.Node})
	r, err := s.run(ctx, "claim rank", p.ID, gangClaimScript, p.Attempt, p.Rank, p.Node, p.Incarnation, ms(s.now()), s.cfg.EventsMaxLen,
		rdata, p.Lease.Milliseconds(), p.Addr, p.Port)
	if err != nil {
		return 0, err
	}
	return claimOutcome(r), nil
}

// RenewRank extends rank's lease of gang attempt of job id, held by
// incarnation, to now + lease. It returns whether a cancel was asked,
// ErrPreemptRequested (renewed) when a preemption was, and a
// *ConflictError when the attempt ended or moved on (another rank ended
// it: the caller must stop its trainer).
func (s *Store) RenewRank(ctx context.Context, id string, attempt, rank int, incarnation string, lease time.Duration) (cancelRequested bool, err error) {
	r, err := s.run(ctx, "renew rank", id, gangRenewScript, attempt, rank, incarnation, ms(s.now()), lease.Milliseconds())
	if err != nil {
		return false, err
	}
	if r.code == codePreemptAsked {
		return false, fmt.Errorf("jobstore: renew rank %d of %s: %w", rank, id, ErrPreemptRequested)
	}
	if r.code != codeDone {
		return r.cancel, &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("renew needs running rank %d of attempt %d of incarnation %s", rank, attempt, incarnation)}
	}
	return r.cancel, nil
}

// RankSucceeded records that rank's trainer of gang attempt of job id
// succeeded (rank 0 gives the attempt's metrics, merged into the record's,
// and its artifacts). The attempt ends succeeded once every rank has; it
// returns whether this call ended it, and a *ConflictError when the
// attempt already ended otherwise.
func (s *Store) RankSucceeded(ctx context.Context, id string, attempt, rank int, incarnation string, metrics map[string]float64, arts []jobtype.Artifact) (ended bool, err error) {
	mj, aj := "", ""
	if metrics != nil {
		j, err := s.Get(ctx, id)
		if err != nil {
			return false, err
		}
		for k, v := range metrics {
			j.Metrics[k] = v
		}
		mj = mustJSON(j.Metrics)
	}
	if arts != nil {
		aj = mustJSON(arts)
	}
	data := mustJSON(jobtype.StateChange{From: jobtype.StateRunning, To: jobtype.StateSucceeded})
	r, err := s.run(ctx, "rank succeeded", id, gangRankDoneScript, attempt, rank, incarnation, ms(s.now()), s.cfg.EventsMaxLen, data, mj, aj)
	if err != nil {
		return false, err
	}
	if r.code != codeDone {
		return false, &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("rank %d's success needs running attempt %d", rank, attempt)}
	}
	return r.state == jobtype.StateSucceeded, nil
}

// GangOf returns the gang of job id's current (or last) gang attempt with
// each rank's state, or nil when the job never ran as a gang.
func (s *Store) GangOf(ctx context.Context, id string) (*jobtype.Gang, error) {
	v, err := s.rdb.HMGet(ctx, s.key("job", id), "gang", "gang_addr", "gang_port").Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: gang of %s: %w", id, err)
	}
	raw, _ := v[0].(string)
	if raw == "" {
		return nil, nil
	}
	g := &jobtype.Gang{}
	if err := json.Unmarshal([]byte(raw), g); err != nil {
		return nil, fmt.Errorf("jobstore: gang of %s: corrupt field gang: %w", id, err)
	}
	g.Addr, _ = v[1].(string)
	port, _ := v[2].(string)
	g.Port, _ = strconv.Atoi(port)
	fields := make([]string, 0, 2*len(g.Ranks))
	for r := range g.Ranks {
		fields = append(fields, "rank:"+strconv.Itoa(r)+":state", "rank:"+strconv.Itoa(r)+":inc")
	}
	rv, err := s.rdb.HMGet(ctx, s.key("job", id), fields...).Result()
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("jobstore: gang of %s: %w", id, err)
	}
	for r := range g.Ranks {
		g.Ranks[r].State, _ = rv[2*r].(string)
		g.Ranks[r].Incarnation, _ = rv[2*r+1].(string)
	}
	return g, nil
}
