package jobstore

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
)

// The sweep scripts (sweep.go). Like the job scripts they take the prefix
// as ARGV[1] and build their keys from it; each one's comment lists the
// rest of ARGV and its reply.

// luaSweep is prepended (after luaCommon) to every sweep script: the
// sweep's keys, its budgets and admission.
//
// A trial's hash holds, besides a job's fields: sweep_id, trial_index,
// params, rung, stop_at_step, gate, stop_requested and stop_message (a
// stop the sweep asked of a running attempt), sweep_est_usd and
// sweep_est_gpu_h (what admitting it reserves), pending_score (its place
// in the pending set), sweep_reserved_usd and sweep_reserved_gpu_h (what
// it holds now), sweep_settled_usd and sweep_settled_gpu_h (what
// SettleTrial counted as spent so far).
var luaSweep = fmt.Sprintf(`
local MAXPAR = %q
local EPS = 1e-9
local function sweepkey(sid, part)
  if part then return P .. 'sweep:' .. sid .. ':' .. part end
  return P .. 'sweep:' .. sid
end
-- readbudget reads a sweep's budgets and what is reserved and spent.
local function readbudget(sk)
  local v = redis.call('HMGET', sk, 'budget_usd', 'budget_gpu_h', 'reserved_usd', 'spent_usd', 'reserved_gpu_h', 'spent_gpu_h')
  local function num(x) return tonumber(x or '0') or 0 end
  return {busd = num(v[1]), bgpu = num(v[2]), rusd = num(v[3]), susd = num(v[4]), rgpu = num(v[5]), sgpu = num(v[6])}
end
-- budgetgate is nil when an estimate of usd and gpuh fits budget b (each
-- budget > 0: spent + reserved + estimate <= budget), else the gate that
-- says which budget it does not fit and by how much ("next <what> ...").
local function budgetgate(b, usd, gpuh, what)
  if b.busd > 0 and b.susd + b.rusd + usd > b.busd + EPS then
    return string.format('sweep budget: next %%s $%%.2f, $%%.2f of $%%.2f left', what, usd, math.max(b.busd - b.susd - b.rusd, 0), b.busd)
  end
  if b.bgpu > 0 and b.sgpu + b.rgpu + gpuh > b.bgpu + EPS then
    return string.format('sweep budget: next %%s %%.2f GPU-h, %%.2f of %%.2f GPU-h left', what, gpuh, math.max(b.bgpu - b.sgpu - b.rgpu, 0), b.bgpu)
  end
  return nil
end
-- trialbudget reserves trial tid's estimate against its team's and its
-- backend's monthly budgets in month (its reserve_usd and reserve_scopes,
-- set when the sweep was admitted), the same reservation a submitted job
-- makes: nil when reserved (or nothing to reserve), else the gate that
-- says which budget it does not fit and what is left of it.
local function trialbudget(tid, month)
  local v = redis.call('HMGET', jobkey(tid), 'reserve_usd', 'reserve_scopes')
  if not v[1] or (tonumber(v[1]) or 0) <= 0 then return nil end
  local why = reserve_budget(P, tid, month, v[1], strscopes(v[2]))
  if why then return 'budget: next trial ' .. why end
  return nil
end
-- admit puts trial tid of sweep sid into the pending set (score) and the
-- sweep's active set, reserving its estimate (usd, gpuh: strings) against
-- the sweep; b is updated to match.
local function admit(sid, tid, usd, gpuh, score, b)
  redis.call('ZREM', sweepkey(sid, 'waiting'), tid)
  redis.call('ZADD', P .. 'pending', score, tid)
  redis.call('SADD', sweepkey(sid, 'active'), tid)
  redis.call('HSET', jobkey(tid), 'gate', '', 'sweep_reserved_usd', usd, 'sweep_reserved_gpu_h', gpuh)
  redis.call('HINCRBYFLOAT', sweepkey(sid), 'reserved_usd', usd)
  redis.call('HINCRBYFLOAT', sweepkey(sid), 'reserved_gpu_h', gpuh)
  b.rusd = b.rusd + tonumber(usd)
  b.rgpu = b.rgpu + tonumber(gpuh)
end
`, jobtype.ReasonMaxParallel)

// storeTrialsScript stores one chunk of an admitting sweep's trials
// (StoreTrials). The chunk from trial 0 first checks that the sweep's id
// is free (else {EXISTING, id}) and that its idempotency key names no live
// sweep ({EXISTING, that sweep's id}; {IDEM_CONFLICT, id} when that sweep
// was stored from another spec or team); a later chunk checks that the
// sweep is admitting ({CONFLICT, state} otherwise; {NOT_FOUND} when there
// is none), that the stored trials end where the chunk starts ({CONFLICT,
// 'stale', stored}) and that no other filler's lease holds ({CONFLICT,
// 'busy'}). Every chunk checks that its trials' ids are free ({CONFLICT,
// 'taken', id}) and, with KEYS, the ledger's head (a ledger_check reply).
// Then it writes: the sweep's record and indexes (first chunk), every
// trial's record (the common fields, then its own: the last is its gate),
// the job indexes, the trial's first state event, its place in
// sweep:<id>:trials and sweep:<id>:waiting, the ledger records, and the
// sweep's stored count. The chunk that stores the last trial moves the
// sweep to running and drops the filler's lease; the others renew it.
// Nothing is admitted here (AdmitTrials does, with the reservations).
//
//	KEYS[1]  ledger stream  (optional, with KEYS[2])
//	KEYS[2]  ledger head
//	ARGV[1]  prefix
//	ARGV[2]  sweep id
//	ARGV[3]  idempotency key ('' none)
//	ARGV[4]  its fingerprint
//	ARGV[5]  idempotency TTL, seconds
//	ARGV[6]  now, ms
//	ARGV[7]  event stream maxlen
//	ARGV[8]  each trial's first state event data
//	ARGV[9]  the chunk's first trial index
//	ARGV[10] the sweep's number of trials
//	ARGV[11] the filler's name (its lease's value)
//	ARGV[12] the filler's lease, ms
//	ARGV[13] the number of the sweep's field/value entries (0 after the
//	         first chunk), then them
//	then the number of the trials' common field/value entries, then them
//	then n, the number of trials; per trial: id, pending score, estimate
//	  USD, estimate GPU-hours, the number m of its own field/value entries,
//	  the m entries
//	then with KEYS: the head's seq and mac the records were sealed on, the
//	  record count, the records' ledger.EntryArgs
//
// Returns {DONE, id, stored}, {EXISTING, id}, {IDEM_CONFLICT, id},
// {CONFLICT, …}, {NOT_FOUND, ""} or a ledger_check reply.
var storeTrialsScript = redis.NewScript(luaCommon + luaSweep + ledger.LuaAppend + `
local sid, idem, fp, ttl, now, maxlen, data = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]
local from, total, owner, lease = tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11], ARGV[12]
local sk, fk = sweepkey(sid), sweepkey(sid, 'filler')
if from == 0 then
  if redis.call('EXISTS', sk) == 1 then return {EXISTING, sid} end
  if idem ~= '' then
    local v = redis.call('GET', P .. 'sweepidem:' .. idem)
    if v then
      local eid, efp = v, ''
      local sp = string.find(v, ' ', 1, true)
      if sp then eid, efp = string.sub(v, 1, sp - 1), string.sub(v, sp + 1) end
      if redis.call('EXISTS', sweepkey(eid)) == 1 then
        if efp ~= fp then return {IDEM_CONFLICT, eid} end
        return {EXISTING, eid}
      end
    end
  end
else
  local v = redis.call('HMGET', sk, 'state', 'stored')
  if not v[1] then return {NOT_FOUND, ''} end
  if v[1] ~= 'admitting' then return {CONFLICT, v[1]} end
  if tonumber(v[2]) ~= from then return {CONFLICT, 'stale', v[2]} end
  local holder = redis.call('GET', fk)
  if holder and holder ~= owner then return {CONFLICT, 'busy'} end
end
local i = 13
local nsf = tonumber(ARGV[i]); local sf = i + 1; i = sf + nsf
local ncf = tonumber(ARGV[i]); local cf = i + 1; i = cf + ncf
local n = tonumber(ARGV[i]); i = i + 1
local first = i
-- The trials' ids must be free.
local keys = {}
for _ = 1, n do
  keys[#keys + 1] = jobkey(ARGV[i])
  i = i + 5 + tonumber(ARGV[i + 4])
end
if redis.call('EXISTS', unpack(keys)) > 0 then
  for _, k in ipairs(keys) do
    if redis.call('EXISTS', k) == 1 then return {CONFLICT, 'taken', string.sub(k, #P + 5)} end
  end
end
local led = nil
if #KEYS == 2 then
  local bad = ledger_check(KEYS[1], KEYS[2], ARGV[i], ARGV[i + 1])
  if bad then return bad end
  led = {first = i + 3, n = tonumber(ARGV[i + 2])}
end
if from == 0 then
  redis.call('HSET', sk, unpack(ARGV, sf, sf + nsf - 1))
  redis.call('ZADD', P .. 'sweeps', now, sid)
  redis.call('SADD', P .. 'sweeps:running', sid)
  if idem ~= '' then
    redis.call('HSET', sk, 'idem', idem)
    redis.call('SET', P .. 'sweepidem:' .. idem, sid .. ' ' .. fp, 'EX', ttl)
  end
end
-- Index entries: ids (score 0) for jobs and state:queued, (index, id) for
-- the trials and the waiting set.
local ids, byindex = {}, {}
i = first
for k = 1, n do
  local id, nf = ARGV[i], tonumber(ARGV[i + 4])
  local key = jobkey(id)
  -- One HSET: the trial's own fields (the last pair is its gate), then the common ones.
  local f = {unpack(ARGV, i + 5, i + 4 + nf)}
  for c = cf, cf + ncf - 1 do f[#f + 1] = ARGV[c] end
  redis.call('HSET', key, unpack(f))
  ids[#ids + 1] = 0; ids[#ids + 1] = id
  byindex[#byindex + 1] = from + k - 1; byindex[#byindex + 1] = id
  redis.call('XADD', key .. ':events', 'MAXLEN', '~', maxlen, '*', 'type', 'state', 'attempt', 1, 'time', now, 'data', data)
  i = i + 5 + nf
end
redis.call('ZADD', P .. 'jobs', unpack(ids))
redis.call('ZADD', P .. 'state:queued', unpack(ids))
redis.call('ZADD', sweepkey(sid, 'trials'), unpack(byindex))
redis.call('ZADD', sweepkey(sid, 'waiting'), unpack(byindex))
local stored = from + n
if stored >= total then
  redis.call('HSET', sk, 'stored', stored, 'state', 'running', 'stalled', '', 'updated_at', now)
  redis.call('DEL', fk)
else
  redis.call('HSET', sk, 'stored', stored, 'updated_at', now)
  redis.call('SET', fk, owner, 'PX', lease)
end
if led then ledger_write(KEYS[1], KEYS[2], ARGV, led.first, led.n) end
return {DONE, sid, stored}
`)

// admitScript admits waiting trials of a running sweep (AdmitTrials): it
// counts the sweep's active trials that still run or wait to (a trial
// that ended or paused is not counted: the sweep duty settles it), then
// takes the waiting set's head while the count is below max_parallel and
// its estimate fits the budgets. The head it stops at gets the gate that
// stopped it; the sweep's stalled is set to a budget's gate, or cleared.
// A waiting trial that is no longer queued (cancelled meanwhile) is
// dropped from the waiting set.
//
//	ARGV[1]  prefix
//	ARGV[2]  sweep id
//	ARGV[3]  now, ms
//	ARGV[4]  the budget month (Month) of the trials' team and backend
//	         reservations
//	ARGV[5]  the most trials to admit in this call
//
// Returns {DONE, stalled, own, admitted id, …} (own: 1 when the stall is
// the sweep's own budget, 0 for its team's or a backend's, which frees as
// other jobs settle); {NOT_FOUND, ""}; {CONFLICT, state} for a sweep that
// is not running.
var admitScript = redis.NewScript(luaCommon + luaReserve + luaSweep + `
local sid, now, month, limit = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local sk = sweepkey(sid)
local v = redis.call('HMGET', sk, 'state', 'max_parallel', 'stalled')
if not v[1] then return {NOT_FOUND, ''} end
if v[1] ~= 'running' then return {CONFLICT, v[1]} end
local maxp, was = tonumber(v[2]) or 0, v[3] or ''
local count = 0
for _, tid in ipairs(redis.call('SMEMBERS', sweepkey(sid, 'active'))) do
  local st = redis.call('HGET', jobkey(tid), 'state')
  if st and not terminal(st) and st ~= 'paused' then count = count + 1 end
end
local b = readbudget(sk)
local out, stalled, own = {DONE, '', 0}, '', 0
local wk = sweepkey(sid, 'waiting')
while #out - 3 < limit do
  local head = redis.call('ZRANGE', wk, 0, 0)
  if #head == 0 then break end
  local tid = head[1]
  local t = redis.call('HMGET', jobkey(tid), 'state', 'sweep_est_usd', 'sweep_est_gpu_h', 'pending_score')
  if t[1] ~= 'queued' then
    redis.call('ZREM', wk, tid)
  elseif count >= maxp then
    redis.call('HSET', jobkey(tid), 'gate', MAXPAR)
    break
  else
    local eu, eg = t[2] or '0', t[3] or '0'
    local g = budgetgate(b, tonumber(eu), tonumber(eg), 'trial')
    if g then own = 1 else g = trialbudget(tid, month) end
    if g then
      redis.call('HSET', jobkey(tid), 'gate', g)
      stalled = g
      break
    end
    admit(sid, tid, eu, eg, t[4] or '0', b)
    count = count + 1
    out[#out + 1] = tid
  end
end
out[2], out[3] = stalled, own
if stalled ~= was or #out > 3 then redis.call('HSET', sk, 'stalled', stalled, 'updated_at', now) end
return out
`)

// settleTrialScript ends a trial's sweep reservation (SettleTrial): if it
// leaves the sweep's active set, its reservation is released and what it
// spent since its last settlement (usd and gpuh are its totals) is counted.
//
//	ARGV[1]  prefix
//	ARGV[2]  sweep id
//	ARGV[3]  trial id
//	ARGV[4]  the trial's cost so far, USD
//	ARGV[5]  its GPU-hours so far
//
// Returns 1 when it settled, 0 when the trial held nothing (settled
// before, or never admitted).
var settleTrialScript = redis.NewScript(luaCommon + luaReserve + luaSweep + `
local sid, tid = ARGV[2], ARGV[3]
if redis.call('SREM', sweepkey(sid, 'active'), tid) == 0 then return 0 end
local v = redis.call('HMGET', jobkey(tid), 'sweep_reserved_usd', 'sweep_reserved_gpu_h', 'sweep_settled_usd', 'sweep_settled_gpu_h')
local function num(x) return tonumber(x or '0') or 0 end
local sk = sweepkey(sid)
if num(v[1]) ~= 0 then redis.call('HINCRBYFLOAT', sk, 'reserved_usd', -num(v[1])) end
if num(v[2]) ~= 0 then redis.call('HINCRBYFLOAT', sk, 'reserved_gpu_h', -num(v[2])) end
local du, dg = tonumber(ARGV[4]) - num(v[3]), tonumber(ARGV[5]) - num(v[4])
if du > 0 then redis.call('HINCRBYFLOAT', sk, 'spent_usd', du) end
if dg > 0 then redis.call('HINCRBYFLOAT', sk, 'spent_gpu_h', dg) end
redis.call('HSET', jobkey(tid), 'sweep_reserved_usd', '0', 'sweep_reserved_gpu_h', '0', 'sweep_settled_usd', ARGV[4], 'sweep_settled_gpu_h', ARGV[5])
return 1
`)
