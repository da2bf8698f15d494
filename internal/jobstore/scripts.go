package jobstore

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/ledger"
)

// The Lua scripts below are the only writers of a job's state, and make
// only the changes jobtype.Transitions lists (statemachine_test.go checks
// it). Each runs atomically in Redis: it checks the state it expects
// (compare-and-set), writes the record, keeps the per-state indexes and the
// pending set in step, and appends the state change to the job's capped
// event stream. A stale writer gets a conflict instead of overwriting.
//
// Keys are built inside the scripts from the prefix (ARGV[1]) because the
// per-state index a job leaves is only known after reading it, so the job
// scripts take no KEYS (only the ledger's, where said). Lathe runs on one
// Redis (or Sentinel), never Redis Cluster (docs/design.md), so this
// is safe. Store.run passes ARGV[1] prefix and ARGV[2] job id to every job
// script; each script's comment lists the rest.
//
// Every job script but create replies {code, state, attempt, cancel}: the
// code (one of the reply codes below), the job's state, attempt and
// cancel_requested (0 or 1) after the call. The codes, the flags and the
// placeholder are named once here and given to the scripts' text as Lua
// locals by luaCodes, so the Go side and the Lua side cannot drift.

// Reply codes, the first element of a script's reply.
const (
	codeNotFound       = -1 // NOT_FOUND: no such job
	codeConflict       = 0  // CONFLICT: the job's state, attempt, node or incarnation does not allow the change (create: the id is taken)
	codeDone           = 1  // DONE: the change is made
	codeExisting       = 2  // EXISTING: create: the idempotency key names a job stored before
	codeNodeFull       = 3  // NODE_FULL: dispatch: the node has no free slot or GPU
	codeClaimCancelled = 4  // CLAIM_CANCELLED: claim: a cancel was asked; the claim wrote cancelled
	codeFenced         = 5  // FENCED: the leader's fence is stale; nothing written
	codePreemptAsked   = 7  // PREEMPT_ASKED: renew: renewed, and a preemption was asked
	codeOverBudget     = 8  // OVER_BUDGET: promote: the estimate does not fit the sweep's budgets; nothing written. create: stored held, its reservation refused
	codeIdemConflict   = -3 // IDEM_CONFLICT: create: an idempotency key names another spec's job
)

// createRecheck tags create's reply {RECHECK, index, …}: those jobs are
// taken and must get no ledger records.
const createRecheck = "recheck"

// Flags of transitionScript (ARGV[9], comma separated).
const (
	flagRelease     = "release"     // FLAG_RELEASE: free the node reservation
	flagRequeue     = "requeue"     // FLAG_REQUEUE: make the next attempt (attempt+1, into the pending set); a job whose cancel was asked ends cancelled instead
	flagClearCancel = "clearcancel" // FLAG_CLEARCANCEL: clear cancel_requested (retry)
)

// fromPlaceholder (FROM) stands, in a state event's data, for the state a
// script finds; the script replaces it.
const fromPlaceholder = "__FROM__"

// luaCodes is prepended to every job script: the constants above as Lua
// locals.
var luaCodes = fmt.Sprintf(`
local NOT_FOUND, CONFLICT, DONE, EXISTING, NODE_FULL, CLAIM_CANCELLED, FENCED, PREEMPT_ASKED, IDEM_CONFLICT, OVER_BUDGET = %d, %d, %d, %d, %d, %d, %d, %d, %d, %d
local RECHECK, FROM = %q, %q
local EVALS_MAX, LOSS_MAX = %d, %d
local FLAG_RELEASE, FLAG_REQUEUE, FLAG_CLEARCANCEL = %q, %q, %q
local ENDSTATS, DURATION_MS = %q, {%s}
`, codeNotFound, codeConflict, codeDone, codeExisting, codeNodeFull, codeClaimCancelled, codeFenced, codePreemptAsked, codeIdemConflict, codeOverBudget,
	createRecheck, fromPlaceholder, evalsMaxLen, LossSeriesMax, flagRelease, flagRequeue, flagClearCancel,
	endStatsKey, durationBucketsMS())

// luaCommon is prepended to every job script but create: the codes and
// the helpers the scripts share.
var luaCommon = luaCodes + `
local P = ARGV[1]
local function jobkey(id) return P .. 'job:' .. id end
local function evkey(id) return P .. 'job:' .. id .. ':events' end
local function statekey(s) return P .. 'state:' .. s end
local function terminal(s) return s == 'succeeded' or s == 'failed' or s == 'cancelled' or s == 'stopped' end
-- ENDED holds the jobs this call moved into an ended state; countend
-- counts each in the endings tally (endstats.go) when its state event is
-- appended, after the script has written its reason.
local ENDED = {}
local function countend(id)
  ENDED[id] = nil
  local v = redis.call('HMGET', jobkey(id), 'state', 'reason', 'backend', 'route_backend', 'priority', 'run_ms')
  if not terminal(v[1] or '') then return end
  local backend = v[3] or ''
  if backend == '' then backend = v[4] or '' end
  local prio = v[5] or ''
  if prio == '' then prio = 'normal' end
  local k = P .. ENDSTATS
  redis.call('HINCRBY', k, cjson.encode({'n', v[1], v[2] or '', backend, prio}), 1)
  local ran = tonumber(v[6] or '0') or 0
  local bucket = 'inf'
  for i, le in ipairs(DURATION_MS) do
    if ran <= le then bucket = tostring(i); break end
  end
  redis.call('HINCRBY', k, cjson.encode({'d', backend, v[1], bucket}), 1)
  redis.call('HINCRBY', k, cjson.encode({'s', backend, v[1]}), ran)
end
local function addevent(id, maxlen, typ, attempt, now, data)
  redis.call('XADD', evkey(id), 'MAXLEN', '~', maxlen, '*', 'type', typ, 'attempt', attempt, 'time', now, 'data', data)
  if typ == 'state' and ENDED[id] then countend(id) end
end
local function setstate(id, from, to, now)
  if terminal(to) and not terminal(from) then ENDED[id] = true end
  if from == 'running' and to ~= 'running' then
    -- The attempt's run time, counted once, as it leaves running: what
    -- its cost is computed from (policy.JobUsage).
    local v = redis.call('HMGET', jobkey(id), 'started_at', 'route_kind')
    local ran = tonumber(now) - (tonumber(v[1] or '') or tonumber(now))
    if ran > 0 then
      ran = string.format('%d', ran)
      redis.call('HINCRBY', jobkey(id), 'run_ms', ran)
      if not v[2] or v[2] == '' or v[2] == 'local' then redis.call('HINCRBY', jobkey(id), 'local_run_ms', ran) end
    end
  end
  redis.call('ZREM', statekey(from), id)
  redis.call('ZADD', statekey(to), 0, id)
  redis.call('HSET', jobkey(id), 'state', to, 'updated_at', now)
end
local function release(id)
  local v = redis.call('HMGET', jobkey(id), 'node', 'gang', 'attempt')
  if v[1] and v[1] ~= '' then redis.call('HDEL', P .. 'node:' .. v[1] .. ':reserved', id) end
  -- A gang's attempt (gang.go) holds GPUs on every rank's node.
  if v[2] and v[2] ~= '' then
    local ok, g = pcall(cjson.decode, v[2])
    if ok and type(g) == 'table' and tonumber(g['attempt']) == tonumber(v[3]) and type(g['ranks']) == 'table' then
      for _, m in ipairs(g['ranks']) do redis.call('HDEL', P .. 'node:' .. m['node'] .. ':reserved', id) end
    end
  end
end
-- fenced: the write carries a leader's lease value (ARGV fence) and the
-- lease now belongs to another term (or nobody).
local function fenced(fence)
  return fence ~= '' and redis.call('GET', P .. 'leader') ~= fence
end
local function reply(code, id)
  local v = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested')
  return {code, v[1] or '', tonumber(v[2] or '0'), tonumber(v[3] or '0')}
end
-- stopasked is the reason and message of the stop a sweep asked of a
-- trial's attempt ('' none; Stop also sets cancel_requested, and a cancel
-- clears it): an attempt that would end cancelled ends stopped instead.
local function stopasked(id)
  local v = redis.call('HMGET', jobkey(id), 'stop_requested', 'stop_message')
  return v[1] or '', v[2] or ''
end
-- endasked ends attempt of id, found in state from, because a cancel was
-- asked: stopped (reason and error: the stop's) when a stop was asked,
-- else cancelled (msg, if any, goes into the state event). The caller
-- has checked state and attempt and released what it must. Returns the
-- state written.
local function endasked(id, from, attempt, now, maxlen, msg)
  local why, smsg = stopasked(id)
  local ev = {from = from, to = 'cancelled', reason = 'cancelled'}
  if why ~= '' then
    ev = {from = from, to = 'stopped', reason = why, error = smsg}
    redis.call('HSET', jobkey(id), 'reason', why, 'error', smsg, 'finished_at', now)
  else
    if msg ~= '' then ev['error'] = msg end
    redis.call('HSET', jobkey(id), 'reason', 'cancelled', 'finished_at', now)
  end
  setstate(id, from, ev.to, now)
  addevent(id, maxlen, 'state', attempt, now, cjson.encode(ev))
  return ev.to
end
-- workergone ends running attempt want of id, whose worker is gone (its
-- lease expired, or a new incarnation killed its trainer): cancelled (or
-- stopped, endasked) when a cancel was asked, else queued again as attempt
-- want+1 (why goes into the job's error). The caller has checked state and
-- attempt.
local function workergone(id, want, cancel, now, maxlen, data, score, why)
  release(id)
  if cancel == '1' then
    -- A cancel was asked while the worker was gone: the attempt ends, and so does the job.
    endasked(id, 'running', want, now, maxlen, 'cancelled while its worker was gone')
    return reply(DONE, id)
  end
  setstate(id, 'running', 'queued', now)
  redis.call('HSET', jobkey(id), 'attempt', want + 1, 'node', '', 'backend', '', 'gpus', '[]', 'error', 'attempt ' .. want .. ': ' .. why)
  redis.call('ZADD', P .. 'pending', score, id)
  addevent(id, maxlen, 'state', want + 1, now, data)
  return reply(DONE, id)
end
`

// createScript stores new jobs, in one atomic call for a whole batch (one
// job for a plain submit, several for a group commit or the batch endpoint).
// First every idempotency key is checked, before anything is written: a key
// whose value carries another fingerprint (spec and team) than the job's
// refuses the whole call, as does one key given twice in the call with two
// fingerprints; a key naming a job that is gone is forgotten. Then for each
// job: if its key names a job, that job is returned and nothing is stored;
// else the record (with the key in its 'idem' field, so deleting the job
// deletes the key), the indexes, the pending set, the key (value "id fp")
// and the first event are written.
//
// With KEYS (the ledger's stream and head: CreateLogged), ledger records
// about the jobs are written in the same call, so a decision record and the
// job it admits are stored together or not at all (even when Redis refuses
// writes at maxmemory: the script's first write is refused before anything
// is written, and once it has written Redis lets it finish). Before writing
// anything the script checks the head (else a ledger_check reply) and that
// each job with records will be stored: neither its id nor its idempotency
// key (one naming a live job) is taken, in Redis or by an earlier job of the
// call; else it returns {RECHECK, index, …} and stores nothing.
//
//	KEYS[1]  ledger stream  (optional, with KEYS[2])
//	KEYS[2]  ledger head
//	ARGV[1]  prefix
//	ARGV[2]  idempotency TTL, seconds
//	ARGV[3]  now, ms
//	ARGV[4]  event stream maxlen
//	ARGV[5]  first event's data (StateChange JSON)
//	ARGV[6]  n, the number of jobs
//	then per job: id, idempotency key ('' none), its fingerprint, pending
//	  score, the number m of field/value entries, the number r of
//	  reservation entries (0: reserve nothing), the m entries, the r
//	  entries (budgetArgs: reserved by reserve_or_hold once the job is
//	  stored)
//	then with KEYS: the head's seq and mac the records were sealed on, the
//	  record count, the count of jobs that must be new, their 1-based
//	  indexes, the records' ledger.EntryArgs
//
// Returns {code, id, code, id, …}, one pair per job: DONE (stored),
// OVER_BUDGET (stored held: id is the held reason, naming the scope whose
// limit the reservation would pass and what is left of it), EXISTING (id: the job its key names), CONFLICT (the id is
// taken); or {IDEM_CONFLICT,
// index, id} when the key of job index (0-based) conflicts (id: the job it
// names, empty for a key given twice in the call); or a ledger_check reply; or
// {RECHECK, index, …} (1-based).
var createScript = redis.NewScript(luaCodes + ledger.LuaAppend + luaReserve + `
local P = ARGV[1]
local ttl, now, maxlen, data, n = tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
-- The job a key's value names, and its fingerprint ('' for a key written
-- before fingerprints were), or false when that job is gone.
local function named(idem)
  local v = redis.call('GET', P .. 'idem:' .. idem)
  if not v then return false end
  local id, fp = v, ''
  local sp = string.find(v, ' ', 1, true)
  if sp then id, fp = string.sub(v, 1, sp - 1), string.sub(v, sp + 1) end
  if redis.call('EXISTS', P .. 'job:' .. id) == 0 then return false end
  return id, fp
end
local i, seen = 7, {}
local at = {}
for k = 1, n do
  at[k] = i
  local idem, fp = ARGV[i + 1], ARGV[i + 2]
  if idem ~= '' then
    local eid, efp = named(idem)
    if eid and efp ~= '' and efp ~= fp then return {IDEM_CONFLICT, k - 1, eid} end
    if seen[idem] and seen[idem] ~= fp then return {IDEM_CONFLICT, k - 1, ''} end
    seen[idem] = seen[idem] or fp
  end
  i = i + 6 + tonumber(ARGV[i + 4]) + tonumber(ARGV[i + 5])
end
local led = nil
if #KEYS == 2 then
  local j = i
  local bad = ledger_check(KEYS[1], KEYS[2], ARGV[j], ARGV[j + 1])
  if bad then return bad end
  local nrec, nmust = tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  local must = {}
  for m = 1, nmust do must[tonumber(ARGV[j + 3 + m])] = true end
  local recheck, taken = {RECHECK}, {}
  for k = 1, n do
    local id, idem = ARGV[at[k]], ARGV[at[k] + 1]
    if must[k] and ((idem ~= '' and (taken[idem] or named(idem)))
        or redis.call('EXISTS', P .. 'job:' .. id) == 1) then
      recheck[#recheck + 1] = k
    end
    if idem ~= '' then taken[idem] = true end
  end
  if #recheck > 1 then return recheck end
  led = {first = j + 4 + nmust, n = nrec}
end
local out = {}
i = 7
for _ = 1, n do
  local id, idem, fp, score, nf, nb = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local first = i + 6
  local b = first + nf
  i = b + nb
  local existing = false
  if idem ~= '' then existing = named(idem) end
  if existing then
    out[#out + 1] = EXISTING; out[#out + 1] = existing
  else
    local key = P .. 'job:' .. id
    if redis.call('EXISTS', key) == 1 then
      out[#out + 1] = CONFLICT; out[#out + 1] = id
    else
      redis.call('HSET', key, unpack(ARGV, first, first + nf - 1))
      redis.call('ZADD', P .. 'jobs', 0, id)
      redis.call('ZADD', P .. 'state:queued', 0, id)
      redis.call('ZADD', P .. 'pending', score, id)
      if idem ~= '' then
        redis.call('HSET', key, 'idem', idem)
        redis.call('SET', P .. 'idem:' .. idem, id .. ' ' .. fp, 'EX', ttl)
      end
      redis.call('XADD', key .. ':events', 'MAXLEN', '~', maxlen, '*', 'type', 'state', 'attempt', 1, 'time', now, 'data', data)
      local over = reserve_or_hold(P, id, b, nb)
      if over then
        out[#out + 1] = OVER_BUDGET; out[#out + 1] = over
      else
        out[#out + 1] = DONE; out[#out + 1] = id
      end
    end
  end
end
if led then ledger_write(KEYS[1], KEYS[2], ARGV, led.first, led.n) end
return out
`)

// transitionScript moves a job from one of the allowed states to another
// (Finish, Requeue, CancelDispatched, Preempted, CloudPreempted, Started,
// Retry: Store.transition and its move).
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  allowed from states, comma separated ('' any non-terminal)
//	ARGV[4]  expected attempt (0 any)
//	ARGV[5]  to state
//	ARGV[6]  now, ms
//	ARGV[7]  event stream maxlen
//	ARGV[8]  state event data (FROM stands for the state found)
//	ARGV[9]  flags, comma separated: FLAG_RELEASE, FLAG_REQUEUE, FLAG_CLEARCANCEL
//	ARGV[10] pending score (with FLAG_REQUEUE)
//	ARGV[11…] field/value pairs to set on the record
//
// Returns the job reply: DONE, CONFLICT (another state or attempt), or
// NOT_FOUND. With FLAG_REQUEUE and no FLAG_CLEARCANCEL, a job whose cancel
// was asked goes to cancelled instead of queued. A trial whose sweep asked
// it to stop (stop_requested) goes to stopped wherever it would go to
// cancelled (a requeue on a cancel, Finish cancelled, CancelDispatched),
// with the stop's reason and message.
var transitionScript = redis.NewScript(luaCommon + `
local id, allowed, want, to, now, maxlen, data, flags, score = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
local state, attempt = cur[1], tonumber(cur[2])
local ok = false
if allowed == '' then ok = not terminal(state) else
  for s in string.gmatch(allowed, '[^,]+') do if s == state then ok = true end end
end
if not ok or (want ~= 0 and want ~= attempt) then return reply(CONFLICT, id) end
local function has(f) return string.find(',' .. flags .. ',', ',' .. f .. ',', 1, true) ~= nil end
local requeue, clearcancel = has(FLAG_REQUEUE), has(FLAG_CLEARCANCEL)
local stopwhy, stopmsg = '', ''
if not clearcancel then stopwhy, stopmsg = stopasked(id) end
if requeue and not clearcancel and redis.call('HGET', jobkey(id), 'cancel_requested') == '1' then
  -- Requeueing a job whose cancel was asked ends it instead.
  to = 'cancelled'
  requeue = false
  data = '{"from":"' .. FROM .. '","to":"cancelled","reason":"cancelled"}'
  redis.call('HSET', jobkey(id), 'reason', 'cancelled', 'finished_at', now)
end
if to == 'cancelled' and stopwhy ~= '' then
  -- The sweep asked this trial to stop: it ends stopped, not cancelled.
  to = 'stopped'
  data = cjson.encode({from = state, to = 'stopped', reason = stopwhy, error = stopmsg})
end
if has(FLAG_RELEASE) then release(id) end
if clearcancel then redis.call('HSET', jobkey(id), 'cancel_requested', '0') end
setstate(id, state, to, now)
data = string.gsub(data, '"' .. FROM .. '"', '"' .. state .. '"')
if #ARGV >= 11 then
  local fields = {}
  for i = 11, #ARGV do fields[#fields+1] = ARGV[i] end
  redis.call('HSET', jobkey(id), unpack(fields))
end
if to == 'stopped' then redis.call('HSET', jobkey(id), 'reason', stopwhy, 'error', stopmsg, 'finished_at', now) end
local evattempt = attempt
if requeue then
  evattempt = attempt + 1
  redis.call('HSET', jobkey(id), 'attempt', evattempt, 'node', '', 'backend', '', 'gpus', '[]')
  redis.call('ZADD', P .. 'pending', score, id)
end
addevent(id, maxlen, 'state', evattempt, now, data)
return reply(DONE, id)
`)

// dispatchScript reserves room on a node and moves a queued job to
// dispatched, atomically. A GPU job reserves exactly its GPU indices and
// fails if any of them is held; a CPU-only job (no GPUs) takes one of the
// node's CPU slots and fails if they are all held. The node's reservations
// hash maps job id → {"a":attempt,"g":[indices]} (a bare number is an older
// CPU reservation).
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  attempt
//	ARGV[4]  node
//	ARGV[5]  CPU slots on the node
//	ARGV[6]  now, ms
//	ARGV[7]  event stream maxlen
//	ARGV[8]  state event data
//	ARGV[9]  backend
//	ARGV[10] GPU indices, JSON
//	ARGV[11] leader fence ('' none)
//
// Returns the job reply: DONE; CONFLICT (not queued at that attempt, a
// cancel was asked, or it is held); NODE_FULL; FENCED; NOT_FOUND.
var dispatchScript = redis.NewScript(luaCommon + `
local id, want, node, cap, now, maxlen, data, backend, gpus = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
if fenced(ARGV[11] or '') then return {FENCED, 'fenced', 0, 0} end
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested', 'held')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if cur[1] ~= 'queued' or tonumber(cur[2]) ~= want or cur[3] == '1' then return reply(CONFLICT, id) end
-- A held job never runs: a round that planned it on a re-decision whose
-- budget reservation then lost the race (reserve_or_hold stored it held)
-- must not dispatch it, or it would run with no reservation and its cost
-- would reach no budget.
if cur[4] and cur[4] ~= '' then return reply(CONFLICT, id) end
local rkey = P .. 'node:' .. node .. ':reserved'
local asked = cjson.decode(gpus)
local held = {}
local cpu = 0
local vals = redis.call('HVALS', rkey)
for _, v in ipairs(vals) do
  local ok, r = pcall(cjson.decode, v)
  if ok and type(r) == 'table' and type(r['g']) == 'table' and #r['g'] > 0 then
    for _, g in ipairs(r['g']) do held[tonumber(g)] = true end
  else
    cpu = cpu + 1
  end
end
if #asked > 0 then
  for _, g in ipairs(asked) do
    if held[tonumber(g)] then return {NODE_FULL, 'full', want, 0} end
  end
elseif cpu >= cap then
  return {NODE_FULL, 'full', want, 0}
end
redis.call('HSET', rkey, id, '{"a":' .. want .. ',"g":' .. gpus .. '}')
redis.call('ZREM', P .. 'pending', id)
setstate(id, 'queued', 'dispatched', now)
redis.call('HSET', jobkey(id), 'node', node, 'backend', backend, 'gpus', gpus, 'dispatched_at', now)
addevent(id, maxlen, 'state', want, now, data)
return reply(DONE, id)
`)

// claimScript lets a worker take its attempt: dispatched → running (or
// provisioning, for a cloud claim) when the attempt and node match and no
// cancel was asked; dispatched → cancelled when one was.
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  attempt
//	ARGV[4]  node
//	ARGV[5]  the worker's incarnation
//	ARGV[6]  now, ms
//	ARGV[7]  event stream maxlen
//	ARGV[8]  state event data of the claim
//	ARGV[9]  lease, ms (the attempt's lease runs until now + lease)
//	ARGV[10] to state (default running)
//
// Returns the job reply: DONE; CLAIM_CANCELLED (the claim wrote cancelled,
// or stopped for a trial whose sweep asked it to stop: endasked);
// CONFLICT (stale: another state, attempt or node); NOT_FOUND.
var claimScript = redis.NewScript(luaCommon + `
local id, want, node, inc, now, maxlen, rdata = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested', 'node')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if cur[1] ~= 'dispatched' or tonumber(cur[2]) ~= want or cur[4] ~= node then return reply(CONFLICT, id) end
if cur[3] == '1' then
  release(id)
  local ended = endasked(id, 'dispatched', want, now, maxlen, '')
  return {CLAIM_CANCELLED, ended, want, 1}
end
local to = ARGV[10] or 'running'
setstate(id, 'dispatched', to, now)
if to == 'running' then redis.call('HSET', jobkey(id), 'started_at', now) end
redis.call('HSET', jobkey(id), 'incarnation', inc, 'lease_until', tonumber(now) + tonumber(ARGV[9]))
addevent(id, maxlen, 'state', want, now, rdata)
return reply(DONE, id)
`)

// appendScript appends trainer events of the running (or provisioning)
// attempt and updates the record's progress, metrics and artifacts. A
// writer whose attempt is no longer current (or whose job is not running)
// loses. Each eval event (valid JSON data) is also pushed onto the job's
// evals list ({"attempt":a,"time":ms,"data":…}), capped at the last
// evalsMaxLen, which outlives the event stream's trimming (sweeps rank
// trials by it). Each progress update also goes into the job's loss series
// (lossPointLua).
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  attempt
//	ARGV[4]  event stream maxlen
//	ARGV[5…] groups of 5: type ('' no event), time ms, data, field to set on
//	         the record ('' none), its new value
//
// Returns the job reply: DONE, CONFLICT, NOT_FOUND.
var appendScript = redis.NewScript(luaCommon + lossPointLua + progressFromLua + `
local id, want, maxlen = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if (cur[1] ~= 'running' and cur[1] ~= 'provisioning') or tonumber(cur[2]) ~= want then return reply(CONFLICT, id) end
local i = 5
while i + 4 <= #ARGV do
  local typ, t, data, field, value = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+4]
  if typ ~= '' then addevent(id, maxlen, typ, want, t, data) end
  if typ == 'eval' and pcall(cjson.decode, data) then
    redis.call('RPUSH', jobkey(id) .. ':evals', '{"attempt":' .. want .. ',"time":' .. tonumber(t) .. ',"data":' .. data .. '}')
    redis.call('LTRIM', jobkey(id) .. ':evals', -EVALS_MAX, -1)
  end
  if field ~= '' then redis.call('HSET', jobkey(id), field, value) end
  if field == 'progress' then losspoint(id, value); progressfrom(id, want, t, value) end
  i = i + 5
end
return reply(DONE, id)
`)

// progressFromLua keeps an attempt's first progress line (its step, and
// the line's time in ms) in progress_from, as
// {"attempt":a,"step":s,"at":ms}: placement's pace of a running job
// (policy.ProgressEnd). A step that is not a whole number in 0…2^31−1
// is not kept.
var progressFromLua = `
local function progressfrom(id, want, t, value)
  local raw = redis.call('HGET', jobkey(id), 'progress_from')
  if raw then
    local ok, m = pcall(cjson.decode, raw)
    if ok and type(m) == 'table' and tonumber(m['attempt']) == want then return end
  end
  local ok, p = pcall(cjson.decode, value)
  if not ok or type(p) ~= 'table' then return end
  local step, at = tonumber(p['step']), tonumber(t)
  if not step or step ~= math.floor(step) or step < 0 or step > 2147483647 or not at then return end
  redis.call('HSET', jobkey(id), 'progress_from',
    '{"attempt":' .. want .. ',"step":' .. string.format('%d', step) .. ',"at":' .. string.format('%.0f', at) .. '}')
end
`

// cancelScript asks for a job's cancellation. A queued job is cancelled at
// once (it holds nothing; a trial waiting for its sweep leaves the sweep's
// waiting set), as is a paused trial (it leaves the sweep's paused set); a
// dispatched, provisioning or running one gets the durable
// cancel_requested flag (and a cancel_requested event, once), which its
// attempt's owner honours. A cancel wins over a stop the sweep asked
// before (stop_requested is cleared: the attempt ends cancelled).
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  now, ms
//	ARGV[4]  event stream maxlen
//	ARGV[5]  cancelled state event data (FROM stands for the state found)
//	ARGV[6]  cancel_requested event data
//
// Returns the job reply: DONE (also for a job already cancelled), CONFLICT
// (it succeeded or failed), NOT_FOUND.
var cancelScript = redis.NewScript(luaCommon + `
local id, now, maxlen, cdata, rdata = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
local state, attempt = cur[1], cur[2]
if state == 'cancelled' then return reply(DONE, id) end
if terminal(state) then return reply(CONFLICT, id) end
if state == 'queued' or state == 'paused' then
  local sid = redis.call('HGET', jobkey(id), 'sweep_id')
  if sid and sid ~= '' then
    redis.call('ZREM', P .. 'sweep:' .. sid .. ':waiting', id)
    redis.call('SREM', P .. 'sweep:' .. sid .. ':paused', id)
  end
  redis.call('ZREM', P .. 'pending', id)
  cdata = string.gsub(cdata, '"' .. FROM .. '"', '"' .. state .. '"')
  setstate(id, state, 'cancelled', now)
  redis.call('HSET', jobkey(id), 'reason', 'cancelled', 'finished_at', now, 'cancel_requested', '1')
  addevent(id, maxlen, 'state', attempt, now, cdata)
  return reply(DONE, id)
end
if cur[3] ~= '1' then
  redis.call('HSET', jobkey(id), 'cancel_requested', '1', 'updated_at', now)
  addevent(id, maxlen, 'cancel_requested', attempt, now, rdata)
end
if redis.call('HEXISTS', jobkey(id), 'stop_requested') == 1 then redis.call('HDEL', jobkey(id), 'stop_requested', 'stop_message') end
return reply(DONE, id)
`)

// preemptScript asks a job's attempt to make room for an urgent job: a
// running attempt gets preempt_requested (its worker sees it at the next
// lease renewal, stops the trainer, which checkpoints, and calls
// Preempted); a dispatched attempt that has not started goes straight back
// to queued as the next attempt.
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  attempt
//	ARGV[4]  now, ms
//	ARGV[5]  event stream maxlen
//	ARGV[6]  the urgent job's id
//	ARGV[7]  pending score
//	ARGV[8]  leader fence ('' none)
//
// Returns the job reply: DONE, CONFLICT, FENCED, NOT_FOUND.
var preemptScript = redis.NewScript(luaCommon + `
local id, want, now, maxlen, forjob, score = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if fenced(ARGV[8] or '') then return {FENCED, 'fenced', 0, 0} end
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if tonumber(cur[2]) ~= want then return reply(CONFLICT, id) end
if cur[1] == 'dispatched' then
  release(id)
  setstate(id, 'dispatched', 'queued', now)
  redis.call('HINCRBY', jobkey(id), 'preemptions', 1)
  redis.call('HSET', jobkey(id), 'attempt', want + 1, 'node', '', 'backend', '', 'gpus', '[]', 'preempt_requested', '')
  redis.call('ZADD', P .. 'pending', score, id)
  addevent(id, maxlen, 'state', want + 1, now, cjson.encode({from = 'dispatched', to = 'queued', reason = 'preempted', error = 'preempted for ' .. forjob .. ' before it started'}))
  return reply(DONE, id)
end
if cur[1] ~= 'running' then return reply(CONFLICT, id) end
local prev = redis.call('HGET', jobkey(id), 'preempt_requested')
if not prev or prev == '' then
  redis.call('HSET', jobkey(id), 'preempt_requested', forjob)
  addevent(id, maxlen, 'preempt', want, now, cjson.encode({['for'] = forjob}))
end
return reply(DONE, id)
`)

// annotateScript sets fields on a job while attempt is its current one and
// it is dispatched, provisioning or running (what the trainer was given).
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  attempt
//	ARGV[4…] field/value pairs
//
// Returns the job reply: DONE, CONFLICT, NOT_FOUND.
var annotateScript = redis.NewScript(luaCommon + `
local id, want = ARGV[2], tonumber(ARGV[3])
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if tonumber(cur[2]) ~= want or (cur[1] ~= 'running' and cur[1] ~= 'dispatched' and cur[1] ~= 'provisioning') then return reply(CONFLICT, id) end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', jobkey(id), unpack(fields))
return reply(DONE, id)
`)

// renewScript extends the lease of a running (or provisioning) attempt
// held by incarnation.
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  attempt
//	ARGV[4]  incarnation
//	ARGV[5]  now, ms
//	ARGV[6]  lease, ms
//
// Returns the job reply: DONE; PREEMPT_ASKED (renewed, and a preemption was
// asked); CONFLICT (another state, attempt or incarnation); NOT_FOUND.
var renewScript = redis.NewScript(luaCommon + `
local id, want, inc, now, lease = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'incarnation')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if (cur[1] ~= 'running' and cur[1] ~= 'provisioning') or tonumber(cur[2]) ~= want or cur[3] ~= inc then return reply(CONFLICT, id) end
redis.call('HSET', jobkey(id), 'lease_until', now + lease)
local pre = redis.call('HGET', jobkey(id), 'preempt_requested')
if pre and pre ~= '' then return {PREEMPT_ASKED, 'running', want, 0} end
return reply(DONE, id)
`)

// reapScript ends a running attempt whose lease expired more than grace ago
// and makes the next attempt (queued, through the pending set), or ends the
// job cancelled when a cancel was asked (workergone).
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  attempt
//	ARGV[4]  now, ms
//	ARGV[5]  event stream maxlen
//	ARGV[6]  state event data (running → queued)
//	ARGV[7]  pending score
//	ARGV[8]  grace, ms
//	ARGV[9]  leader fence ('' none)
//
// Returns the job reply: DONE; CONFLICT (another state or attempt, or the
// lease has not expired); FENCED; NOT_FOUND.
var reapScript = redis.NewScript(luaCommon + `
local id, want, now, maxlen, data, score, grace = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
if fenced(ARGV[9] or '') then return {FENCED, 'fenced', 0, 0} end
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'lease_until', 'cancel_requested')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if cur[1] ~= 'running' or tonumber(cur[2]) ~= want then return reply(CONFLICT, id) end
if tonumber(cur[3] or '0') + grace >= now then return reply(CONFLICT, id) end
return workergone(id, want, cur[4], now, maxlen, data, score, 'lease expired (worker gone)')
`)

// deleteScript removes a finished job entirely: record, event stream, GPU
// series, eval lines, index entries, and its idempotency key (if the key still names
// it). It refuses a job that is not in a terminal state.
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//
// Returns {DONE, the state it was in, 0, 0}, or the job reply: CONFLICT (not
// terminal), NOT_FOUND (its id is dropped from the jobs index).
var deleteScript = redis.NewScript(luaCommon + `
local id = ARGV[2]
local st = redis.call('HGET', jobkey(id), 'state')
if not st then
  redis.call('ZREM', P .. 'jobs', id)
  return {NOT_FOUND, '', 0, 0}
end
if not terminal(st) then return reply(CONFLICT, id) end
-- Its idempotency key goes with it (if the key still names it).
local idem = redis.call('HGET', jobkey(id), 'idem')
if idem and idem ~= '' then
  local v = redis.call('GET', P .. 'idem:' .. idem)
  if v == id or (v and string.sub(v, 1, #id + 1) == id .. ' ') then redis.call('DEL', P .. 'idem:' .. idem) end
end
redis.call('DEL', jobkey(id), evkey(id), jobkey(id) .. ':gpu', jobkey(id) .. ':evals', jobkey(id) .. ':loss')
redis.call('ZREM', P .. 'jobs', id)
redis.call('ZREM', statekey(st), id)
return {DONE, st, 0, 0}
`)

// adoptScript hands a provisioning or running attempt from one worker
// incarnation (gone) to another on the same node: the incarnation and lease
// change only if the attempt, node and old incarnation are still the ones
// the caller saw.
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  attempt
//	ARGV[4]  node
//	ARGV[5]  old incarnation
//	ARGV[6]  new incarnation
//	ARGV[7]  now, ms
//	ARGV[8]  lease, ms
//
// Returns the job reply: DONE, CONFLICT, NOT_FOUND.
var adoptScript = redis.NewScript(luaCommon + `
local id, want, node, old, inc, now, lease = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'node', 'incarnation')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if (cur[1] ~= 'running' and cur[1] ~= 'provisioning') or tonumber(cur[2]) ~= want or cur[3] ~= node or (cur[4] or '') ~= old then return reply(CONFLICT, id) end
redis.call('HSET', jobkey(id), 'incarnation', inc, 'lease_until', now + lease)
return reply(DONE, id)
`)

// releaseDeadScript ends a running attempt on node whose worker incarnation
// is dead (a new incarnation on the same node killed its trainer's process
// group) and makes the next attempt, as the reaper would (workergone),
// without waiting for the lease.
//
//	ARGV[1]  prefix
//	ARGV[2]  job id
//	ARGV[3]  attempt
//	ARGV[4]  node
//	ARGV[5]  dead incarnation ('' any but the live one)
//	ARGV[6]  live incarnation
//	ARGV[7]  now, ms
//	ARGV[8]  event stream maxlen
//	ARGV[9]  state event data (running → queued)
//	ARGV[10] pending score
//
// Returns the job reply: DONE; CONFLICT (another state, attempt, node or
// incarnation); NOT_FOUND.
var releaseDeadScript = redis.NewScript(luaCommon + `
local id, want, node, dead, live, now, maxlen, data, score = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9], ARGV[10]
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'node', 'incarnation', 'cancel_requested')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
local inc = cur[4] or ''
if cur[1] ~= 'running' or tonumber(cur[2]) ~= want or cur[3] ~= node or inc == live or (dead ~= '' and inc ~= dead) then
  return reply(CONFLICT, id)
end
return workergone(id, want, cur[5], now, maxlen, data, score, 'its worker died and was restarted')
`)
