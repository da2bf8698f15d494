// Package jobstore is Lathe's job store in Redis: the only authority on a
// job's state (docs/design.md). It holds each job's record, its numbered
// attempts, the pending set the scheduler places from, per-state indexes
// for listing, and a capped per-job event stream. Every state change is one
// Lua compare-and-set (scripts.go), one of the changes jobtype.Transitions
// allows, that also appends the change to the stream.
//
// Keys (prefix "lathe:" by default):
//
//	job:<id>            hash   the record
//	job:<id>:events     stream state changes, progress, eval, checkpoint, artifact, log lines (capped)
//	jobs                zset   every job id (score 0; ids sort by creation time)
//	state:<state>       zset   job ids in that state
//	pending             zset   queued job ids, score = priority rank × 1e14 + submit ms
//	idem:<key>          string Idempotency-Key → "<job id> <fingerprint of spec and team>" (24 h; deleted with the job)
//	node:<name>         string a worker's heartbeat (JSON, with a TTL)
//	node:<name>:reserved hash  job id → attempt, the node's reserved slots
package jobstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
)

// Sentinel errors callers branch on.
var (
	// ErrNotFound: no job with that id.
	ErrNotFound = errors.New("job not found")
	// ErrConflict: the job is not in a state that allows the change
	// (wrapped in a *ConflictError that says which state it is in).
	ErrConflict = errors.New("transition not allowed")
	// ErrNodeFull: the node has no free slot.
	ErrNodeFull = errors.New("node has no free slot")
)

// ConflictError says why a compare-and-set lost.
type ConflictError struct {
	ID      string
	State   jobtype.State
	Attempt int
	Want    string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("job %s is %s (attempt %d): %s", e.ID, e.State, e.Attempt, e.Want)
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// ErrIdempotencyConflict: an idempotency key was sent again with another
// spec, or by another team, than the job it names (wrapped in an
// *IdempotencyConflictError).
var ErrIdempotencyConflict = errors.New("idempotency key already used for another job spec")

// IdempotencyConflictError names the key and the job it already names.
type IdempotencyConflictError struct {
	// Key is NewJob.IdempotencyKey as the caller gave it.
	Key string
	// Index is the job's place in a CreateMany call (0 for Create).
	Index int
	// JobID is the job the key names.
	JobID string
}

func (e *IdempotencyConflictError) Error() string {
	if e.JobID == "" {
		return fmt.Sprintf("idempotency key %q is given twice in one call, with different specs", e.Key)
	}
	return fmt.Sprintf("idempotency key %q names job %s, created from another spec or by another team", e.Key, e.JobID)
}

// Unwrap makes errors.Is(err, ErrIdempotencyConflict) true.
func (e *IdempotencyConflictError) Unwrap() error { return ErrIdempotencyConflict }

// Config configures a Store. Zero values take the defaults stated.
type Config struct {
	// Prefix of every key; default "lathe:".
	Prefix string
	// EventsMaxLen caps each job's event stream (approximately, MAXLEN ~);
	// default 5000. Older events, log lines first in practice, are trimmed.
	EventsMaxLen int64
	// IdempotencyTTL is how long an Idempotency-Key maps to its job; default 24h.
	IdempotencyTTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// FillLease is how long a sweep filler's claim on an admitting sweep
	// lasts without a new chunk (StoreTrials); default 5 s.
	FillLease time.Duration
	// MinReplicas is how many replicas must acknowledge the write that
	// stores an admission (Create*, StoreTrials: Redis WAIT, sent on the
	// same connection right after the script) before it returns; fewer
	// within ReplicaTimeout is an error wrapping ErrNotReplicated, which
	// the API answers as "outcome unknown" (503). 0, the default, waits for
	// none: with replicas, an acknowledged submit may then be lost when
	// the primary dies before they copied it. Every other write is not
	// waited for (docs/operations.md, "Replicas and failover").
	MinReplicas int
	// ReplicaTimeout bounds that wait; default 500 ms. The client's read
	// timeout must be longer (a pipeline reads with it).
	ReplicaTimeout time.Duration
}

// Store reads and writes jobs in Redis. It is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	cfg Config
}

// New returns a Store over rdb.
func New(rdb redis.UniversalClient, cfg Config) *Store {
	if cfg.Prefix == "" {
		cfg.Prefix = "lathe:"
	}
	if cfg.EventsMaxLen <= 0 {
		cfg.EventsMaxLen = 5000
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FillLease <= 0 {
		cfg.FillLease = 5 * time.Second
	}
	if cfg.ReplicaTimeout <= 0 {
		cfg.ReplicaTimeout = replicaTimeout
	}
	return &Store{rdb: rdb, cfg: cfg}
}

// WithClient returns a Store with the same configuration over another
// client (the scheduler gives blocking stream reads their own pool).
func (s *Store) WithClient(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb, cfg: s.cfg} }

// Redis returns the underlying client (for health checks).
func (s *Store) Redis() redis.UniversalClient { return s.rdb }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.cfg.Prefix }

func (s *Store) key(parts ...string) string { return s.cfg.Prefix + strings.Join(parts, ":") }
func (s *Store) now() time.Time             { return s.cfg.Now() }
func ms(t time.Time) string                 { return strconv.FormatInt(t.UnixMilli(), 10) }

// NewID returns a new job id: "j-", ten base32 characters of the time in
// milliseconds, and six of a random number. Within one process ids strictly
// increase (a second id in the same millisecond takes the last random part
// plus one, as monotonic ULIDs do), so listing by id is listing by creation.
func NewID(now time.Time) string {
	idMu.Lock()
	t := uint64(max(now.UnixMilli(), 0))
	var r uint64
	if t <= idLastMs {
		t, r = idLastMs, idLastRand+1
		if r >= 1<<30 {
			t, r = t+1, 0
		}
	} else {
		var b [4]byte
		_, _ = rand.Read(b[:])
		r = uint64(binary.BigEndian.Uint32(b[:])) >> 3 // 29 bits: room to count up
	}
	idLastMs, idLastRand = t, r
	idMu.Unlock()
	return encodeID(t, r)
}

// NewIDAt is the id NewID would make at time t with random part r (29
// bits): the derived ids of schedule ticks (TickID).
func NewIDAt(t time.Time, r uint64) string {
	return encodeID(uint64(max(t.UnixMilli(), 0)), r)
}

func encodeID(t, r uint64) string {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz" // Crockford, lower case
	var b [18]byte
	b[0], b[1] = 'j', '-'
	for i := 11; i >= 2; i-- {
		b[i] = alphabet[t&31]
		t >>= 5
	}
	for i := 17; i >= 12; i-- {
		b[i] = alphabet[r&31]
		r >>= 5
	}
	return string(b[:])
}

var (
	idMu                 sync.Mutex
	idLastMs, idLastRand uint64
)

// ValidID reports whether id has the shape NewID makes, or TrialID's (the
// 18 characters of NewID's shape, "-" and five digits): a cheap guard
// before building keys from user input.
func ValidID(id string) bool {
	if len(id) == trialIDLen {
		if id[18] != '-' {
			return false
		}
		for _, c := range id[19:] {
			if c < '0' || c > '9' {
				return false
			}
		}
		id = id[:18]
	}
	if len(id) != 18 || !strings.HasPrefix(id, "j-") {
		return false
	}
	for _, c := range id[2:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// trialIDLen is the length of a TrialID.
const trialIDLen = 24

// PendingScore orders the pending set: priority first, then submit time.
func PendingScore(p jobspec.Priority, submitted time.Time) float64 {
	return float64(p.Rank())*1e14 + float64(submitted.UnixMilli())
}

// NewJob is what Create needs.
type NewJob struct {
	// ID is the job's id when the caller drew it already (NewID, e.g. to
	// record a decision under it first); "" draws one.
	ID             string
	Spec           *jobspec.Spec // normalised
	OutputURI      string        // where the per-job folder goes (file://…/<id>)
	Submitter      string
	Team           string
	IdempotencyKey string
	// Route is the routing decision it was admitted under (nil: none).
	Route *jobtype.RouteInfo
	// Records, for CreateLogged and CreateManyLogged, builds the ledger
	// records about this job (its decision first, then e.g. its stagings)
	// numbered from seq, the decision's sequence number, which also
	// becomes Route.LedgerSeq. They are appended in the script that stores
	// the job, and only if it is stored (not for a job an idempotency key
	// names already). Nil: no records.
	Records func(seq int64) []ledger.Record
	// Budget is reserved in the script that stores the job (nil: none).
	Budget *BudgetReservation
}

// Created is one job of a CreateMany: the job, and whether its idempotency
// key named a job stored before (then nothing new was stored).
type Created struct {
	Job     *jobtype.Job
	Existed bool
}

// MaxCreateBatch is the most jobs one CreateMany call stores.
const MaxCreateBatch = 1000

// Create stores a queued job with attempt 1 and puts it in the pending set,
// in one script. With an IdempotencyKey seen before it returns that job and
// existed=true, storing nothing. (Committing concurrent calls together,
// as databases group commits, was measured and was slower here: see
// docs/benchmarks.md.)
func (s *Store) Create(ctx context.Context, nj NewJob) (job *jobtype.Job, existed bool, err error) {
	res, errs, err := s.createMany(ctx, []NewJob{nj})
	if err != nil {
		return nil, false, err
	}
	return res[0].Job, res[0].Existed, errs[0]
}

// CreateMany stores up to MaxCreateBatch jobs in one atomic script call:
// all of them are stored, or (on an error) none. Results are in the order
// of njs. Two jobs of one call with the same idempotency key are one job.
func (s *Store) CreateMany(ctx context.Context, njs []NewJob) ([]Created, error) {
	if len(njs) == 0 {
		return nil, nil
	}
	if len(njs) > MaxCreateBatch {
		return nil, fmt.Errorf("jobstore: create: %d jobs in one batch, at most %d", len(njs), MaxCreateBatch)
	}
	res, errs, err := s.createMany(ctx, njs)
	if err != nil {
		return nil, err
	}
	for _, e := range errs {
		if e != nil {
			return res, e
		}
	}
	return res, nil
}

// CreateLogged is Create that appends nj.Records to l in the same script
// that stores the job: the job and its records are stored together or not
// at all (Redis at maxmemory, a lost connection), and a job an idempotency
// key names already gets no records.
func (s *Store) CreateLogged(ctx context.Context, l *ledger.Ledger, nj NewJob) (job *jobtype.Job, existed bool, err error) {
	res, errs, err := s.createLogged(ctx, l, []NewJob{nj})
	if err != nil {
		return nil, false, err
	}
	return res[0].Job, res[0].Existed, errs[0]
}

// CreateManyLogged is CreateMany with each job's Records appended to l in
// the same script (CreateLogged).
func (s *Store) CreateManyLogged(ctx context.Context, l *ledger.Ledger, njs []NewJob) ([]Created, error) {
	if len(njs) == 0 {
		return nil, nil
	}
	if len(njs) > MaxCreateBatch {
		return nil, fmt.Errorf("jobstore: create: %d jobs in one batch, at most %d", len(njs), MaxCreateBatch)
	}
	res, errs, err := s.createLogged(ctx, l, njs)
	if err != nil {
		return nil, err
	}
	for _, e := range errs {
		if e != nil {
			return res, e
		}
	}
	return res, nil
}

// createLogged runs the create script with the ledger records of njs,
// sealed on the ledger's head, until the head it sealed on is still the
// head and every job with records is stored: a job the script finds taken
// (its idempotency key or id) loses its records and the call is made again.
func (s *Store) createLogged(ctx context.Context, l *ledger.Ledger, njs []NewJob) ([]Created, []error, error) {
	if l == nil {
		return s.createMany(ctx, njs)
	}
	seq, mac, err := l.Head(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("jobstore: create: %w", err)
	}
	build, err := recordBuilders(njs)
	if err != nil {
		return nil, nil, err
	}
	for {
		jobs, recs, must := withRecords(njs, build, seq)
		if len(recs) == 0 {
			return s.createMany(ctx, jobs)
		}
		sealed, err := l.Seal(seq, mac, recs)
		if err != nil {
			return nil, nil, fmt.Errorf("jobstore: create: %w", err)
		}
		tail := append([]any{strconv.FormatInt(seq, 10), mac, len(sealed), len(must)}, must...)
		tail = append(tail, ledger.EntryArgs(sealed)...)
		out, errs, raw, err := s.createRun(ctx, jobs, l.Keys(), tail)
		if err == nil && raw == nil {
			l.Appended()
		}
		if err != nil || raw == nil {
			return out, errs, err
		}
		if ledger.IsCheckReply(raw) {
			if seq, mac, err = l.CheckReply(raw); err != nil {
				return nil, nil, fmt.Errorf("jobstore: create: %w", err)
			}
		} else {
			dropTaken(build, raw)
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("jobstore: create: %w", err)
		}
	}
}

// recordBuilders returns each job's Records (nil for a job without), and
// refuses a job with records but no id.
func recordBuilders(njs []NewJob) ([]func(int64) []ledger.Record, error) {
	build := make([]func(int64) []ledger.Record, len(njs))
	for i := range njs {
		if njs[i].Records != nil && njs[i].ID == "" {
			return nil, fmt.Errorf("jobstore: create: jobs[%d] has ledger records but no id (draw one with NewID)", i)
		}
		build[i] = njs[i].Records
	}
	return build, nil
}

// withRecords builds the ledger records of njs numbered from seq+1 on:
// jobs is a copy of njs whose jobs with records have their route's
// LedgerSeq set to their first record's number, recs the records in order,
// must the 1-based indexes of the jobs that have records.
func withRecords(njs []NewJob, build []func(int64) []ledger.Record, seq int64) (jobs []NewJob, recs []ledger.Record, must []any) {
	jobs = append([]NewJob(nil), njs...)
	next := seq + 1
	for i := range jobs {
		if build[i] == nil {
			continue
		}
		rs := build[i](next)
		if len(rs) == 0 {
			continue
		}
		if jobs[i].Route != nil {
			ri := *jobs[i].Route
			ri.LedgerSeq = next
			jobs[i].Route = &ri
		}
		recs = append(recs, rs...)
		must = append(must, i+1)
		next += int64(len(rs))
	}
	return jobs, recs, must
}

// dropTaken reads a {createRecheck, index, …} reply: the jobs it names
// (1-based) are taken, so they get no records.
func dropTaken(build []func(int64) []ledger.Record, raw []any) {
	for _, v := range raw[1:] {
		if k, ok := v.(int64); ok && k >= 1 && int(k) <= len(build) {
			build[k-1] = nil
		}
	}
}

// createMany runs the create script once for njs. err is for the whole
// call; errs[i] is for njs[i] alone (an id collision, or reading back the
// job an idempotency key names).
func (s *Store) createMany(ctx context.Context, njs []NewJob) ([]Created, []error, error) {
	out, errs, _, err := s.createRun(ctx, njs, nil, nil)
	return out, errs, err
}

// createRun runs the create script once for njs, with keys and the ledger
// part of ARGV (tail) when they are set. raw is the script's answer when it
// stored nothing for the ledger's sake (a ledger_check reply or a
// recheck), nil otherwise.
func (s *Store) createRun(ctx context.Context, njs []NewJob, keys []string, tail []any) (out []Created, errs []error, raw []any, err error) {
	b := createBatch{njs: njs, now: s.now()}
	args, err := s.createArgs(&b)
	if err != nil {
		return nil, nil, nil, err
	}
	args = append(args, tail...)
	v, err := s.runReplicated(ctx, createScript, keys, args...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("jobstore: create: %w", err)
	}
	res, ok := v.([]any)
	if !ok || len(res) == 0 {
		return nil, nil, nil, fmt.Errorf("jobstore: create: script answered %T", v)
	}
	if tag, ok := first(res).(string); ok && (tag == createRecheck || ledger.IsCheckReply(res)) {
		return nil, nil, res, nil
	}
	if code, _ := res[0].(int64); code == codeIdemConflict && len(res) == 3 {
		return nil, nil, nil, idemConflict(res, njs)
	}
	if len(res) != 2*len(njs) {
		return nil, nil, nil, fmt.Errorf("jobstore: create: script answered %d values for %d jobs", len(res), len(njs))
	}
	out, errs = s.created(ctx, &b, res)
	return out, errs, nil, nil
}

// createBatch is one run of the create script: the new jobs, the time they
// are created at, and what createArgs chose for each (its id, drawn when
// not given, and its output URI) for reading the answer.
type createBatch struct {
	njs  []NewJob
	now  time.Time
	ids  []string
	outs []string
}

// createArgs is the create script's ARGV for b's jobs, less the ledger
// part; it fills b.ids and b.outs.
func (s *Store) createArgs(b *createBatch) ([]any, error) {
	njs, now := b.njs, b.now
	data := mustJSON(jobtype.StateChange{To: jobtype.StateQueued})
	args := make([]any, 0, 6+len(njs)*24)
	args = append(args, s.cfg.Prefix, int(s.cfg.IdempotencyTTL.Seconds()), ms(now), s.cfg.EventsMaxLen, data, len(njs))
	b.ids = make([]string, len(njs))
	b.outs = make([]string, len(njs))
	for i, nj := range njs {
		id := nj.ID
		if id == "" {
			id = NewID(now)
		} else if !ValidID(id) {
			return nil, fmt.Errorf("jobstore: create: invalid job id %q", id)
		}
		b.ids[i] = id
		b.outs[i] = strings.ReplaceAll(nj.OutputURI, "{id}", id)
		var err error
		if args, err = appendJobArgs(args, nj, id, b.outs[i], now); err != nil {
			return nil, err
		}
	}
	return args, nil
}

// appendJobArgs appends one job's part of the create script's ARGV: its
// id, idempotency key and fingerprint, pending score, and the fields of
// its new record, counted.
func appendJobArgs(args []any, nj NewJob, id, out string, now time.Time) ([]any, error) {
	specJSON, err := json.Marshal(nj.Spec)
	if err != nil {
		return nil, fmt.Errorf("jobstore: create: %w", err)
	}
	// Only what a new job has; absent fields read as empty.
	fields := []any{"id", id, "name", nj.Spec.Name, "state", string(jobtype.StateQueued), "attempt", 1,
		"spec", specJSON, "output_uri", out, "created_at", ms(now), "updated_at", ms(now)}
	if nj.Submitter != "" || nj.Team != "" {
		fields = append(fields, "submitter", nj.Submitter, "team", nj.Team)
	}
	if nj.Route != nil {
		fields = append(fields, "route", mustJSON(nj.Route))
	}
	fields = append(fields, tallyFieldsOf(nj.Spec, nj.Route)...)
	fp := ""
	if nj.IdempotencyKey != "" {
		fp = idemFingerprint(specJSON, nj.Team)
	}
	budget := budgetArgs(nj.Budget, nj.Route)
	args = append(args, id, nj.IdempotencyKey, fp, strconv.FormatFloat(PendingScore(nj.Spec.Priority, now), 'f', 0, 64), len(fields), len(budget))
	args = append(args, fields...)
	return append(args, budget...), nil
}

// idemConflict is the error for the script's {codeIdemConflict, index,
// job id} answer: the key of njs[index] names another spec or team's job.
func idemConflict(res []any, njs []NewJob) error {
	idx, _ := res[1].(int64)
	jobID, _ := res[2].(string)
	if idx < 0 || int(idx) >= len(njs) {
		return fmt.Errorf("jobstore: create: script named job %d of %d", idx, len(njs))
	}
	return fmt.Errorf("jobstore: create: %w", &IdempotencyConflictError{Key: njs[idx].IdempotencyKey, Index: int(idx), JobID: jobID})
}

// created reads the script's answer of a code and an id per job of b.
func (s *Store) created(ctx context.Context, b *createBatch, res []any) ([]Created, []error) {
	out := make([]Created, len(b.njs))
	errs := make([]error, len(b.njs))
	t := time.UnixMilli(b.now.UnixMilli()).UTC()
	for i, nj := range b.njs {
		code, _ := res[2*i].(int64)
		gotID, _ := res[2*i+1].(string)
		switch code {
		case codeDone, codeOverBudget:
			// Stored as given: build the record here instead of reading it back.
			j := &jobtype.Job{ID: b.ids[i], Name: nj.Spec.Name, State: jobtype.StateQueued, Attempt: 1, GPUs: []int{},
				Metrics: map[string]float64{}, Artifacts: []jobtype.Artifact{}, OutputURI: b.outs[i], Submitter: nj.Submitter,
				Team: nj.Team, CreatedAt: t, UpdatedAt: t, Spec: *nj.Spec, Route: nj.Route}
			if code == codeOverBudget {
				j.Route, j.Held = heldRoute(nj.Budget, nj.Route), gotID
			} else if budgetArgs(nj.Budget, nil) != nil {
				j.BudgetReservedUSD = nj.Budget.USD
			}
			out[i] = Created{Job: j}
		case codeExisting:
			j, err := s.Get(ctx, gotID)
			out[i] = Created{Job: j, Existed: true}
			errs[i] = err
		default:
			errs[i] = fmt.Errorf("jobstore: create: id collision on %s", gotID)
		}
	}
	return out, errs
}

func first(res []any) any {
	if len(res) == 0 {
		return nil
	}
	return res[0]
}

// idemFingerprint is what an idempotency key is stored with besides its
// job: a hash of the normalised spec and the team, so that the key sent
// again with another spec or by another team is a conflict, not that job.
func idemFingerprint(specJSON []byte, team string) string {
	h := sha256.New()
	h.Write(specJSON)
	h.Write([]byte{0})
	h.Write([]byte(team))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

var jobFields = []string{"id", "name", "state", "reason", "error", "attempt", "backend", "node", "gpus",
	"progress", "metrics", "artifacts", "output_uri", "cancel_requested", "submitter", "team",
	"created_at", "updated_at", "started_at", "finished_at", "spec",
	"preempt_requested", "cuda_visible_devices", "preemptions", "simulated_gpus",
	"route", "held", "cost_usd", "instance", "incarnation", "lease_until", "budget_reserved_usd",
	"sweep_id", "trial_index", "params", "rung", "stop_at_step", "gate", "stop_requested",
	"cloud_cost_usd", "run_ms", "local_run_ms", "held_epoch", "sweep_settled_usd", "sweep_settled_gpu_h", "cost_settled_usd",
	"progress_from", "gang", "gang_addr", "gang_port"} // gang's three last (rawJob.gang)

// Get returns the job's record, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*jobtype.Job, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("jobstore: get %q: %w", id, ErrNotFound)
	}
	vals, err := s.rdb.HMGet(ctx, s.key("job", id), jobFields...).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: get %s: %w", id, err)
	}
	return decodeJob(id, vals)
}

func decodeJob(id string, vals []any) (*jobtype.Job, error) { return decodeJobAs(id, vals, false) }

// decodeJobAs decodes a record read with jobFields (a brief one: only
// briefFields set, the others nil, and only the spec's priority decoded).
func decodeJobAs(id string, vals []any, brief bool) (*jobtype.Job, error) {
	r := rawJob{vals: vals}
	if r.str(2) == "" {
		return nil, fmt.Errorf("jobstore: get %s: %w", id, ErrNotFound)
	}
	j := r.scalars(id)
	r.dec(8, &j.GPUs)
	r.dec(9, &j.Progress)
	r.dec(10, &j.Metrics)
	r.dec(11, &j.Artifacts)
	if brief {
		r.errs = append(r.errs, decodeBrief(j, r.str(20), r.str(25))...)
	} else {
		r.dec(20, &j.Spec)
		if r.str(25) != "" {
			j.Route = &jobtype.RouteInfo{}
			r.dec(25, j.Route)
		}
	}
	if r.str(28) != "" {
		j.Instance = &jobtype.Instance{}
		r.dec(28, j.Instance)
	}
	j.Trial = r.trial()
	r.progressFrom(j)
	r.gang(j)
	if j.GPUs == nil {
		j.GPUs = []int{}
	}
	if j.Metrics == nil {
		j.Metrics = map[string]float64{}
	}
	if j.Artifacts == nil {
		j.Artifacts = []jobtype.Artifact{}
	}
	if len(r.errs) > 0 {
		return nil, fmt.Errorf("jobstore: get %s: corrupt record: %w", id, errors.Join(r.errs...))
	}
	return j, nil
}

// rawJob is a record as read with jobFields (field i at vals[i]), and the
// errors met decoding its JSON fields.
type rawJob struct {
	vals []any
	errs []error
}

// progressFrom sets j.ProgressFrom from progress_from
// ({"attempt":a,"step":s,"at":ms}, appendScript), when set.
func (r *rawJob) progressFrom(j *jobtype.Job) {
	var m struct {
		Attempt, Step int
		At            int64
	}
	if i := len(jobFields) - 4; i < len(r.vals) && r.str(i) != "" {
		r.dec(i, &m)
		j.ProgressFrom = &jobtype.ProgressMark{Attempt: m.Attempt, Step: m.Step, At: time.UnixMilli(m.At).UTC()}
	}
}

// gang sets j.Gang from the gang fields (gang.go), when set.
func (r *rawJob) gang(j *jobtype.Job) {
	i := len(jobFields) - 3
	if i >= len(r.vals) || r.str(i) == "" {
		return
	}
	j.Gang = &jobtype.Gang{}
	r.dec(i, j.Gang)
	j.Gang.Addr = r.str(i + 1)
	j.Gang.Port = atoi(r.str(i + 2))
}

// str is field i, "" when not set.
func (r *rawJob) str(i int) string { v, _ := r.vals[i].(string); return v }

// dec decodes JSON field i into v, if set; an error is kept in r.errs.
func (r *rawJob) dec(i int, v any) {
	if s := r.str(i); s != "" {
		if err := json.Unmarshal([]byte(s), v); err != nil {
			r.errs = append(r.errs, fmt.Errorf("field %s: %w", jobFields[i], err))
		}
	}
}

// scalars is the job with the fields that need no JSON: strings, numbers,
// flags and times.
func (r *rawJob) scalars(id string) *jobtype.Job {
	str := r.str
	j := &jobtype.Job{ID: id, Name: str(1), State: jobtype.State(str(2)), Reason: str(3), Error: str(4),
		Backend: str(6), Node: str(7), OutputURI: str(12), CancelRequested: str(13) == "1",
		Submitter: str(14), Team: str(15)}
	j.Attempt = atoi(str(5))
	j.PreemptRequested = str(21)
	j.CUDAVisibleDevices = str(22)
	j.Preemptions = atoi(str(23))
	j.SimulatedGPUs = str(24) == "1"
	j.Held = str(26)
	j.CostUSD = atof(str(27))
	j.CloudCostUSD = atof(str(39))
	j.RunS = atof(str(40)) / 1000
	j.LocalRunS = atof(str(41)) / 1000
	j.HeldEpoch = str(42)
	j.SettledCostUSD = atof(str(45))
	j.BudgetReservedUSD = atof(str(31))
	j.Incarnation = str(29)
	if t := msTime(str(30)); !t.IsZero() {
		j.LeaseUntil = &t
	}
	j.CreatedAt = msTime(str(16))
	j.UpdatedAt = msTime(str(17))
	if t := msTime(str(18)); !t.IsZero() {
		j.StartedAt = &t
	}
	if t := msTime(str(19)); !t.IsZero() {
		j.FinishedAt = &t
	}
	return j
}

// trial is the job's sweep trial, nil for a job of no sweep.
func (r *rawJob) trial() *jobtype.TrialInfo {
	str := r.str
	if str(32) == "" {
		return nil
	}
	t := &jobtype.TrialInfo{SweepID: str(32), Gate: str(37), StopRequested: str(38)}
	t.Index = atoi(str(33))
	t.Rung = atoi(str(35))
	t.StopAtStep = atoi(str(36))
	t.SettledUSD, t.SettledGPUHours = atof(str(43)), atof(str(44))
	r.dec(34, &t.Params)
	return t
}

// msTime is the time of a field of Unix milliseconds; zero for a field
// empty (not set: a brief record's fields left out too, so an empty one is
// answered before strconv, whose error for it allocates), 0 or not a number.
func msTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// atoi is an integer field's value, 0 for one empty or not a number (an
// empty one is answered before strconv: its error allocates, and most
// records leave most of these fields unset).
func atoi(s string) int {
	if s == "" {
		return 0
	}
	n, _ := strconv.Atoi(s)
	return n
}

// atof is atoi for a float field.
func atof(s string) float64 {
	if s == "" {
		return 0
	}
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// List returns up to limit jobs, newest first, optionally only those in
// state; cursor is the last id of the previous page ("" for the first).
// next is "" when there are no more.
func (s *Store) List(ctx context.Context, state jobtype.State, cursor string, limit int) (jobs []*jobtype.Job, next string, err error) {
	if limit <= 0 {
		limit = 50
	}
	key := s.key("jobs")
	if state != "" {
		key = s.key("state", string(state))
	}
	max := "+"
	if cursor != "" {
		if !ValidID(cursor) {
			return nil, "", fmt.Errorf("jobstore: list: bad cursor %q", cursor)
		}
		max = "(" + cursor
	}
	ids, err := s.rdb.ZRevRangeByLex(ctx, key, &redis.ZRangeBy{Max: max, Min: "-", Count: int64(limit + 1)}).Result()
	if err != nil {
		return nil, "", fmt.Errorf("jobstore: list: %w", err)
	}
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	jobs, err = s.GetMany(ctx, ids)
	return jobs, next, err
}

// GetMany returns the records of ids in order, skipping ids that vanished.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]*jobtype.Job, error) {
	if len(ids) == 0 {
		return []*jobtype.Job{}, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, s.key("job", id), jobFields...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("jobstore: get many: %w", err)
	}
	return decodeFound(len(ids), func(i int) (*jobtype.Job, error) { return decodeJob(ids[i], cmds[i].Val()) })
}

// decodeFound is the records decode(0) … decode(n-1) give, in order,
// skipping those that are gone (ErrNotFound); the first other error stops it.
func decodeFound(n int, decode func(i int) (*jobtype.Job, error)) ([]*jobtype.Job, error) {
	out := make([]*jobtype.Job, 0, n)
	for i := range n {
		j, err := decode(i)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// briefFields are the fields GetManyBrief reads: what a view of every
// active job shows and counts (the overview, the /metrics scrape).
var briefFields = []string{"name", "state", "attempt", "backend", "node", "gpus", "progress", "submitter", "team",
	"created_at", "updated_at", "started_at", "spec", "route", "cost_usd", "instance", "sweep_id", "gate"}

// briefIndex is each of briefFields' index in jobFields.
var briefIndex = func() []int {
	out := make([]int, len(briefFields))
	for i, f := range briefFields {
		out[i] = slices.Index(jobFields, f)
	}
	return out
}()

// briefArgs is an HMGET of briefFields, its key (args[1]) to be set.
var briefArgs = hmgetArgs(briefFields)

// hmgetArgs is an HMGET of fields, its key (args[1]) to be set by
// hmgetMany: the field names boxed once, not once a job.
func hmgetArgs(fields []string) []any {
	out := []any{"hmget", ""}
	for _, f := range fields {
		out = append(out, f)
	}
	return out
}

// hmgetMany runs args (hmgetArgs) on each job of ids in one pipeline: the
// replies in the order of ids.
func (s *Store) hmgetMany(ctx context.Context, ids []string, args []any, op string) ([]*redis.SliceCmd, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		a := slices.Clone(args)
		a[1] = s.key("job", id)
		cmds[i] = redis.NewSliceCmd(ctx, a...)
		_ = pipe.Process(ctx, cmds[i])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("jobstore: %s: %w", op, err)
	}
	return cmds, nil
}

// GetManyBrief is GetMany reading only briefFields, in one pipeline: each
// job's id, name, state, attempt, backend, node, GPUs, progress,
// submitter, team, times, cost, instance and sweep and gate; of its spec
// only the priority, of its route the backend, site and kind (brief.go).
// The rest is left zero (metrics, artifacts, error, reason, the trial's
// params …). The overview and the /metrics scrape read every active job
// this way: decoding each whole record was most of their time
// (BenchmarkGetMany2200: 2,200 records in 0.44× GetMany's time).
func (s *Store) GetManyBrief(ctx context.Context, ids []string) ([]*jobtype.Job, error) {
	if len(ids) == 0 {
		return []*jobtype.Job{}, nil
	}
	cmds, err := s.hmgetMany(ctx, ids, briefArgs, "get many")
	if err != nil {
		return nil, err
	}
	vals := make([]any, len(jobFields))
	return decodeFound(len(ids), func(i int) (*jobtype.Job, error) {
		clear(vals)
		for k, v := range cmds[i].Val() {
			vals[briefIndex[k]] = v
		}
		return decodeJobAs(ids[i], vals, true)
	})
}

// States is each job's state ("" for one that is gone), in one pipeline
// of HGETs: for a duty that reads whole records only of the jobs in some
// states (the settler: of the reserved jobs, those that ended).
func (s *Store) States(ctx context.Context, ids []string) ([]jobtype.State, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGet(ctx, s.key("job", id), "state")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: states: %w", err)
	}
	out := make([]jobtype.State, len(ids))
	for i, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("jobstore: state of %s: %w", ids[i], err)
		}
		out[i] = jobtype.State(c.Val())
	}
	return out, nil
}

// CountByState returns how many jobs are in each state.
func (s *Store) CountByState(ctx context.Context) (map[jobtype.State]int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make(map[jobtype.State]*redis.IntCmd, len(jobtype.States))
	for _, st := range jobtype.States {
		cmds[st] = pipe.ZCard(ctx, s.key("state", string(st)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("jobstore: count: %w", err)
	}
	out := make(map[jobtype.State]int64, len(cmds))
	for st, c := range cmds {
		out[st] = c.Val()
	}
	return out, nil
}

// Pending returns up to n queued job ids in placement order.
func (s *Store) Pending(ctx context.Context, n int) ([]string, error) {
	ids, err := s.rdb.ZRange(ctx, s.key("pending"), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: pending: %w", err)
	}
	return ids, nil
}

// PendingCount returns the size of the pending set.
func (s *Store) PendingCount(ctx context.Context) (int64, error) {
	n, err := s.rdb.ZCard(ctx, s.key("pending")).Result()
	if err != nil {
		return 0, fmt.Errorf("jobstore: pending count: %w", err)
	}
	return n, nil
}

// IDsInState returns up to n ids in a state (oldest first).
func (s *Store) IDsInState(ctx context.Context, st jobtype.State, n int) ([]string, error) {
	ids, err := s.rdb.ZRangeByLex(ctx, s.key("state", string(st)), &redis.ZRangeBy{Min: "-", Max: "+", Count: int64(n)}).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: ids in %s: %w", st, err)
	}
	return ids, nil
}

// result decodes a script's {code, state, attempt, cancel} reply.
type result struct {
	code    int64
	state   jobtype.State
	attempt int
	cancel  bool
}

func decodeResult(v any) (result, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 4 {
		return result{}, fmt.Errorf("unexpected script reply %v", v)
	}
	r := result{}
	r.code, _ = arr[0].(int64)
	st, _ := arr[1].(string)
	r.state = jobtype.State(st)
	a, _ := arr[2].(int64)
	r.attempt = int(a)
	c, _ := arr[3].(int64)
	r.cancel = c == 1
	return r, nil
}

func (s *Store) run(ctx context.Context, op, id string, script *redis.Script, args ...any) (result, error) {
	v, err := script.Run(ctx, s.rdb, nil, append([]any{s.cfg.Prefix, id}, args...)...).Result()
	if err != nil {
		return result{}, fmt.Errorf("jobstore: %s %s: %w", op, id, err)
	}
	r, err := decodeResult(v)
	if err != nil {
		return result{}, fmt.Errorf("jobstore: %s %s: %w", op, id, err)
	}
	if r.code == codeNotFound {
		return r, fmt.Errorf("jobstore: %s %s: %w", op, id, ErrNotFound)
	}
	return r, nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("jobstore: marshal %T: %v", v, err)) // only our own plain types reach here
	}
	return string(b)
}

// Delete removes a finished (succeeded, failed, cancelled or stopped)
// job: its record, events, eval lines and index entries. Artifacts on disk are not touched.
func (s *Store) Delete(ctx context.Context, id string) error {
	r, err := s.run(ctx, "delete", id, deleteScript)
	if err != nil {
		return err
	}
	if r.code != codeDone {
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: "delete needs a finished job"}
	}
	return nil
}

// PruneFinished deletes the oldest finished jobs (by id, that is by
// creation) beyond keep, and every finished job created before olderThan
// (zero: no age limit), at most max per call. It returns how many it
// deleted. A sweep's trials are not pruned (they belong to their sweep,
// which lists and ranks them); pruning whole sweeps is not built, so a
// sweep's trials stay until deleted one by one.
func (s *Store) PruneFinished(ctx context.Context, keep int, olderThan time.Time, max int) (int, error) {
	deleted := 0
	var ids []string
	for _, st := range []jobtype.State{jobtype.StateSucceeded, jobtype.StateFailed, jobtype.StateCancelled} {
		got, err := s.rdb.ZRangeByLex(ctx, s.key("state", string(st)), &redis.ZRangeBy{Min: "-", Max: "+"}).Result()
		if err != nil {
			return 0, fmt.Errorf("jobstore: prune: %w", err)
		}
		for _, id := range got {
			if len(id) != trialIDLen { // a trial (TrialID) belongs to its sweep
				ids = append(ids, id)
			}
		}
	}
	sort.Strings(ids) // oldest first
	excess := len(ids) - keep
	if keep <= 0 {
		excess = 0
	}
	for i, id := range ids {
		if deleted >= max {
			break
		}
		old := !olderThan.IsZero() && idTime(id).Before(olderThan)
		if i >= excess && !old {
			continue
		}
		if err := s.Delete(ctx, id); err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}

// idTime is the creation time encoded in a job id.
func idTime(id string) time.Time {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	if !ValidID(id) {
		return time.Time{}
	}
	var t int64
	for _, c := range id[2:12] {
		t = t<<5 | int64(strings.IndexRune(alphabet, c))
	}
	return time.UnixMilli(t)
}
