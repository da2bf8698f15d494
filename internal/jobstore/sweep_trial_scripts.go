package jobstore

import "github.com/redis/go-redis/v9"

// pauseScript ends a trial's running attempt paused (Pause): its node
// reservation is released, its metrics set, and it joins the sweep's
// paused set. With a cancel asked it ends cancelled instead, or stopped
// when the sweep asked the stop (endasked).
//
//	ARGV[1]  prefix
//	ARGV[2]  trial id
//	ARGV[3]  attempt
//	ARGV[4]  now, ms
//	ARGV[5]  event stream maxlen
//	ARGV[6]  metrics JSON ('' leave them)
//	ARGV[7]  the step the attempt stopped at
//
// Returns the job reply: DONE, CONFLICT (not a running trial at that
// attempt), NOT_FOUND.
var pauseScript = redis.NewScript(luaCommon + luaSweep + `
local id, want, now, maxlen, metrics, step = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested', 'sweep_id', 'rung')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
local sid = cur[4] or ''
if cur[1] ~= 'running' or tonumber(cur[2]) ~= want or sid == '' then return reply(CONFLICT, id) end
release(id)
if metrics ~= '' then redis.call('HSET', jobkey(id), 'metrics', metrics) end
if cur[3] == '1' then
  endasked(id, 'running', want, now, maxlen, '')
  return reply(DONE, id)
end
setstate(id, 'running', 'paused', now)
redis.call('HSET', jobkey(id), 'finished_at', now)
redis.call('SADD', sweepkey(sid, 'paused'), id)
local rung = cur[5] or '0'
addevent(id, maxlen, 'state', want, now, cjson.encode({from = 'running', to = 'paused', reason = 'rung ' .. rung,
  error = 'attempt ' .. want .. ' reached step ' .. step .. ', the step limit of rung ' .. rung .. '; paused with its checkpoint'}))
return reply(DONE, id)
`)

// promoteScript queues a paused trial as its next attempt at a higher
// rung (Promote): paused → queued, attempt+1, rung and stop_at_step set,
// out of the paused set, its estimate reserved against the sweep (into the
// active set and the pending set). The trial's last attempt must be
// settled (not in the active set) and its sweep running.
//
//	ARGV[1]  prefix
//	ARGV[2]  trial id
//	ARGV[3]  sweep id
//	ARGV[4]  the paused attempt
//	ARGV[5]  rung
//	ARGV[6]  stop_at_step
//	ARGV[7]  estimate, USD
//	ARGV[8]  estimate, GPU-hours
//	ARGV[9]  pending score
//	ARGV[10] now, ms
//	ARGV[11] event stream maxlen
//
// Returns the job reply: DONE, CONFLICT, NOT_FOUND; or {OVER_BUDGET, the
// gate saying which budget, attempt, 0} (nothing written).
var promoteScript = redis.NewScript(luaCommon + luaSweep + `
local id, sid, want, rung, stopat = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local eu, eg, score, now, maxlen = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested', 'sweep_id')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
if cur[1] ~= 'paused' or tonumber(cur[2]) ~= want or cur[3] == '1' or cur[4] ~= sid then return reply(CONFLICT, id) end
local sk = sweepkey(sid)
if redis.call('HGET', sk, 'state') ~= 'running' or redis.call('SISMEMBER', sweepkey(sid, 'active'), id) == 1 then
  return reply(CONFLICT, id)
end
local b = readbudget(sk)
local g = budgetgate(b, tonumber(eu), tonumber(eg), 'rung')
if g then return {OVER_BUDGET, g, want, 0} end
redis.call('SREM', sweepkey(sid, 'paused'), id)
setstate(id, 'paused', 'queued', now)
redis.call('HSET', jobkey(id), 'attempt', want + 1, 'rung', rung, 'stop_at_step', stopat, 'node', '', 'backend', '', 'gpus', '[]',
  'finished_at', '', 'reason', '', 'error', '')
admit(sid, id, eu, eg, score, b)
addevent(id, maxlen, 'state', want + 1, now, cjson.encode({from = 'paused', to = 'queued', reason = 'promoted to rung ' .. rung}))
return reply(DONE, id)
`)

// stopScript ends a trial stopped (Stop): a queued one (waiting, or
// admitted: it leaves the pending set, and stays in the active set for
// the sweep duty to settle) or a paused one at once; a dispatched,
// provisioning or running one gets stop_requested (its reason),
// stop_message and cancel_requested, so that every path that ends an
// attempt on a cancel ends it stopped instead (endasked). A cancel already
// under way (cancel_requested without a stop) is left to win.
//
//	ARGV[1]  prefix
//	ARGV[2]  trial id
//	ARGV[3]  reason
//	ARGV[4]  message
//	ARGV[5]  now, ms
//	ARGV[6]  event stream maxlen
//
// Returns {code, the state found, attempt, cancel}: DONE (also for a trial
// stopped before), CONFLICT (not a trial, or it succeeded, failed or was
// cancelled), NOT_FOUND.
var stopScript = redis.NewScript(luaCommon + luaSweep + `
local id, why, msg, now, maxlen = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local cur = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested', 'sweep_id', 'stop_requested')
if not cur[1] then return {NOT_FOUND, '', 0, 0} end
local st, attempt, sid, asked = cur[1], tonumber(cur[2]), cur[4] or '', cur[5] or ''
local found = {DONE, st, attempt, tonumber(cur[3] or '0')}
if terminal(st) and st ~= 'stopped' then return reply(CONFLICT, id) end
if st == 'stopped' then return found end
if st == 'queued' or st == 'paused' then
  if sid ~= '' then
    redis.call('ZREM', sweepkey(sid, 'waiting'), id)
    redis.call('SREM', sweepkey(sid, 'paused'), id)
  end
  redis.call('ZREM', P .. 'pending', id)
  setstate(id, st, 'stopped', now)
  redis.call('HSET', jobkey(id), 'reason', why, 'error', msg, 'finished_at', now, 'gate', '')
  addevent(id, maxlen, 'state', attempt, now, cjson.encode({from = st, to = 'stopped', reason = why, error = msg}))
  return found
end
if cur[3] == '1' and asked == '' then return found end
if asked == '' then
  redis.call('HSET', jobkey(id), 'stop_requested', why, 'stop_message', msg, 'cancel_requested', '1', 'updated_at', now)
  addevent(id, maxlen, 'stop_requested', attempt, now, cjson.encode({reason = why, error = msg}))
end
return found
`)

// finishSweepScript marks a running sweep done when its waiting, active
// and paused sets are all empty, and takes it (or a cancelled sweep whose
// trials are all settled) out of sweeps:running (FinishSweep).
//
//	ARGV[1]  prefix
//	ARGV[2]  sweep id
//	ARGV[3]  now, ms
//
// Returns {DONE, 'done'} (also for a sweep done before), {CONFLICT, state}
// (its sets are not empty, or it was cancelled), {NOT_FOUND, ""}.
var finishSweepScript = redis.NewScript(luaCommon + luaSweep + `
local sid, now = ARGV[2], ARGV[3]
local sk = sweepkey(sid)
local st = redis.call('HGET', sk, 'state')
if not st then return {NOT_FOUND, ''} end
if st == 'done' then return {DONE, st} end
if st ~= 'running' and st ~= 'cancelled' then return {CONFLICT, st} end
local left = redis.call('ZCARD', sweepkey(sid, 'waiting')) + redis.call('SCARD', sweepkey(sid, 'active')) + redis.call('SCARD', sweepkey(sid, 'paused'))
if left > 0 then return {CONFLICT, st} end
if st == 'running' then
  redis.call('HSET', sk, 'state', 'done', 'finished_at', now, 'updated_at', now, 'stalled', '')
end
redis.call('SREM', P .. 'sweeps:running', sid)
return {DONE, st == 'running' and 'done' or st}
`)

// cancelSweepScript cancels a sweep and one chunk of its trials
// (CancelSweep calls it chunk by chunk): the first call moves the sweep
// running (or admitting) → cancelled (it stays in sweeps:running until its trials are
// settled: FinishSweep); each call then takes up to
// count trials from index from: a queued (waiting or admitted) or paused
// trial is cancelled at once (reason cancelled, error "sweep cancelled");
// a dispatched, provisioning or running one gets cancel_requested (a stop
// asked before is dropped: the cancel wins).
//
//	ARGV[1]  prefix
//	ARGV[2]  sweep id
//	ARGV[3]  from index
//	ARGV[4]  count
//	ARGV[5]  now, ms
//	ARGV[6]  event stream maxlen
//	ARGV[7]  the cancelled state event's error
//
// Returns {DONE, trials cancelled or asked, trials looked at}; {CONFLICT,
// 0, 0} for a sweep that is done; {NOT_FOUND, 0, 0}.
var cancelSweepScript = redis.NewScript(luaCommon + luaSweep + `
local sid, from, count, now, maxlen, why = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local sk = sweepkey(sid)
local st = redis.call('HGET', sk, 'state')
if not st then return {NOT_FOUND, 0, 0} end
if st == 'done' then return {CONFLICT, 0, 0} end
if st == 'running' or st == 'admitting' then
  -- It stays in sweeps:running until the duty has settled its admitted
  -- trials (FinishSweep takes it out). An admitting sweep's filler stores
  -- no chunk after this (its script checks the state).
  redis.call('HSET', sk, 'state', 'cancelled', 'finished_at', now, 'updated_at', now, 'stalled', '')
  redis.call('DEL', sweepkey(sid, 'filler'))
end
local ids = redis.call('ZRANGEBYSCORE', sweepkey(sid, 'trials'), from, '+inf', 'LIMIT', 0, count)
local n = 0
for _, id in ipairs(ids) do
  local v = redis.call('HMGET', jobkey(id), 'state', 'attempt', 'cancel_requested')
  local s = v[1]
  if s == 'queued' or s == 'paused' then
    redis.call('ZREM', P .. 'pending', id)
    redis.call('ZREM', sweepkey(sid, 'waiting'), id)
    redis.call('SREM', sweepkey(sid, 'paused'), id)
    setstate(id, s, 'cancelled', now)
    redis.call('HSET', jobkey(id), 'reason', 'cancelled', 'error', why, 'finished_at', now, 'cancel_requested', '1', 'gate', '')
    addevent(id, maxlen, 'state', v[2], now, cjson.encode({from = s, to = 'cancelled', reason = 'cancelled', error = why}))
    n = n + 1
  elseif s == 'dispatched' or s == 'provisioning' or s == 'running' then
    if v[3] ~= '1' then
      redis.call('HSET', jobkey(id), 'cancel_requested', '1', 'updated_at', now)
      addevent(id, maxlen, 'cancel_requested', v[2], now, '{}')
    end
    redis.call('HDEL', jobkey(id), 'stop_requested', 'stop_message')
    n = n + 1
  end
end
return {DONE, n, #ids}
`)

// claimTickScript claims a schedule's tick (ClaimTick): SET NX with a TTL,
// else the run that claimed it.
//
//	KEYS[1]  tick:<schedule>:<ms>
//	ARGV[1]  run id
//	ARGV[2]  TTL, seconds
//
// Returns {1, run id} when this call claimed it, {0, the claimant's run
// id} otherwise.
var claimTickScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return {1, ARGV[1]} end
return {0, redis.call('GET', KEYS[1]) or ''}
`)
