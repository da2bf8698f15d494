package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// Idempotency first: an admission with an idempotency key claims the key
// before it decides anything (ClaimIdem), so that two requests with the
// same key give the same outcome whatever the budgets say by the time the
// second is decided: the second waits for the first's claim to end, then
// finds the job or sweep the first stored. The claim is a placeholder
// value ("pending:<token>") in the key itself, with a TTL; the create
// script that stores the job or sweep overwrites it with the key's value
// ("id fingerprint"), and a claim whose admission stored nothing is
// dropped (ReleaseIdem).

// IdemKind names what an idempotency key is for.
type IdemKind string

// The kinds: a submitted job's key, a sweep's.
const (
	IdemJob   IdemKind = "idem"
	IdemSweep IdemKind = "sweepidem"
)

// IdemClaimOutcome is what ClaimIdem found.
type IdemClaimOutcome int

const (
	// IdemClaimed: the key names nothing; this request holds its claim.
	IdemClaimed IdemClaimOutcome = iota
	// IdemBusy: another request holds the key's claim; wait and ask again.
	IdemBusy
	// IdemExisting: the key names a stored job or sweep of the same spec
	// and team (ID).
	IdemExisting
	// IdemConflict: the key names a stored job or sweep of another spec
	// or team (ID).
	IdemConflict
)

var claimIdemScript = redis.NewScript(`
local k, obj, fp, mine, ttl = KEYS[1], ARGV[1], ARGV[2], 'pending:' .. ARGV[3], ARGV[4]
local v = redis.call('GET', k)
if v then
  if string.sub(v, 1, 8) == 'pending:' then
    if v == mine then return {0, ''} end
    return {1, ''}
  end
  local id, efp = v, ''
  local sp = string.find(v, ' ', 1, true)
  if sp then id, efp = string.sub(v, 1, sp - 1), string.sub(v, sp + 1) end
  if redis.call('EXISTS', obj .. id) == 1 then
    if efp ~= '' and efp ~= fp then return {3, id} end
    return {2, id}
  end
end
redis.call('SET', k, mine, 'PX', ttl)
return {0, ''}
`)

var releaseIdemScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == 'pending:' .. ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// ClaimIdem claims idempotency key (scoped, as stored) of kind for the
// request token for ttl, unless it names a stored job or sweep: then that
// one's id, and whether it was stored from the same spec and team
// (fingerprint: JobFingerprint, SweepFingerprint).
func (s *Store) ClaimIdem(ctx context.Context, kind IdemKind, key, fingerprint, token string, ttl time.Duration) (IdemClaimOutcome, string, error) {
	obj := s.cfg.Prefix + "job:"
	if kind == IdemSweep {
		obj = s.cfg.Prefix + "sweep:"
	}
	res, err := claimIdemScript.Run(ctx, s.rdb, []string{s.key(string(kind), key)}, obj, fingerprint, token, ttl.Milliseconds()).Slice()
	if err != nil {
		return 0, "", fmt.Errorf("jobstore: claim idempotency key: %w", err)
	}
	code, _ := res[0].(int64)
	id, _ := res[1].(string)
	return IdemClaimOutcome(code), id, nil
}

// ReleaseIdem drops token's claim on key when it still holds it (its
// admission stored nothing: a refusal, an error).
func (s *Store) ReleaseIdem(ctx context.Context, kind IdemKind, key, token string) error {
	if err := releaseIdemScript.Run(ctx, s.rdb, []string{s.key(string(kind), key)}, token).Err(); err != nil {
		return fmt.Errorf("jobstore: release idempotency key: %w", err)
	}
	return nil
}

// JobFingerprint is what a job's idempotency key is stored with: its
// normalised spec's and its team's hash (as the create script stores it).
func JobFingerprint(spec *jobspec.Spec, team string) string {
	b, _ := json.Marshal(spec)
	return idemFingerprint(b, team)
}

// SweepFingerprint is what a sweep's idempotency key is stored with: its
// spec's (JSON) and its team's hash (as the sweep's create script stores
// it).
func SweepFingerprint(spec []byte, team string) string {
	if len(spec) == 0 {
		spec = []byte("null")
	}
	return idemFingerprint(spec, team)
}
