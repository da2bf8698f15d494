package ledger

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrTampered means the ledger in Redis is not as Lathe wrote it: an entry is
// unreadable, the head is missing or unreadable, or (from Report.Err) Verify
// found a problem.
var ErrTampered = errors.New("ledger: tampered")

// Record is one ledger entry. Append fills Seq, Time, Prev, MAC and StreamID;
// the caller gives the rest.
type Record struct {
	// Seq numbers records 1, 2, 3, … with no gaps.
	Seq int64 `json:"seq"`
	// Time is when the record was appended (the ledger's clock, UTC).
	Time time.Time `json:"time"`
	// Kind says what the record is: "decision", "staging", … (the caller's).
	Kind string `json:"kind"`
	// JobID is the job the record is about, if any.
	JobID string `json:"job_id,omitempty"`
	// Team is the submitting team.
	Team string `json:"team,omitempty"`
	// Token is the name of the API token that submitted, never its secret.
	Token string `json:"token,omitempty"`
	// ConfigHash identifies the configuration the decision was made under.
	ConfigHash string `json:"config_hash,omitempty"`
	// Body is the decision itself as JSON: inputs, candidates accepted or
	// rejected and why, estimates, the choice. Append stores it compacted.
	Body json.RawMessage `json:"body"`
	// Prev is the MAC of record Seq-1 ("" for record 1).
	Prev string `json:"prev"`
	// MAC is the hex HMAC-SHA256 under the ledger key of the record's
	// canonical bytes (Canonical), which cover every field above.
	MAC string `json:"mac"`
	// StreamID is the Redis stream entry id; not covered by the MAC.
	StreamID string `json:"stream_id,omitempty"`
}

// Ledger appends records to, and reads and verifies, one ledger in Redis. It
// is safe for concurrent use, also by several processes over the same Redis.
type Ledger struct {
	rdb    redis.UniversalClient
	key    []byte
	stream string
	head   string
	now    func() time.Time
	anchor *Anchor // nil: Verify holds Redis to nothing outside it

	// appended is the AnchorKeeper's notice of an append (nil: none).
	appended atomic.Pointer[func()]
}

// Option changes a Ledger's defaults (New).
type Option func(*Ledger)

// WithClock sets the clock that stamps Record.Time; the default is time.Now.
func WithClock(now func() time.Time) Option { return func(l *Ledger) { l.now = now } }

// WithAnchor keeps the ledger's head outside Redis too, in the anchor file
// at path (Anchor): Verify then fails when Redis is behind it (wiped, or
// rolled back to an older copy), and an AnchorKeeper moves it forward as
// records are appended. Without it (the default) Verify checks the chain
// alone, which a wipe passes.
func WithAnchor(path string) Option { return func(l *Ledger) { l.anchor = NewAnchor(path) } }

// Anchor is the ledger's anchor (WithAnchor), nil without one.
func (l *Ledger) Anchor() *Anchor { return l.anchor }

// Appended tells the ledger's AnchorKeeper, if it has one, that records may
// have been appended: a script using LuaAppend calls it once Redis has
// answered (Append and AppendMany call it themselves). It never blocks; the
// keeper anchors the new records once they have settled (AnchorKeeperConfig).
func (l *Ledger) Appended() {
	if f := l.appended.Load(); f != nil {
		(*f)()
	}
}

// New returns the ledger kept under prefix (default "lathe:") in rdb,
// chained with key. It panics if key is shorter than MinKeySize, which
// LoadKey never returns.
func New(rdb redis.UniversalClient, key []byte, prefix string, opts ...Option) *Ledger {
	if len(key) < MinKeySize {
		panic(fmt.Sprintf("ledger: key of %d bytes; at least %d are needed", len(key), MinKeySize))
	}
	if prefix == "" {
		prefix = "lathe:"
	}
	l := &Ledger{rdb: rdb, key: append([]byte(nil), key...), stream: prefix + "ledger", head: prefix + "ledger:head", now: time.Now}
	for _, o := range opts {
		o(l)
	}
	return l
}

// fields are the stream entry's field names, in the order Append writes them
// (and LuaAppend's ledger_fields).
var fields = [...]string{"seq", "time", "kind", "job_id", "team", "token", "config_hash", "body", "prev", "mac"}

// Append adds r to the end of the ledger and returns it as stored: Seq,
// Time, Prev, MAC and StreamID are filled in (whatever r held in them), Body
// is compacted (nil becomes null). It fails, appending nothing, if Body is not
// valid JSON or a string field is not valid UTF-8, and with ErrTampered if the
// head is missing while the stream is not empty. Concurrent appenders (other
// goroutines, other processes) never fork the chain: the loser of a race
// recomputes on the new head and tries again until ctx ends.
func (l *Ledger) Append(ctx context.Context, r Record) (Record, error) {
	recs, err := l.AppendMany(ctx, []Record{r})
	if err != nil {
		return Record{}, err
	}
	return recs[0], nil
}

// entryValues returns r's stream field values, in the order of fields.
func entryValues(r Record) [len(fields)]string {
	return [...]string{strconv.FormatInt(r.Seq, 10), formatTime(r.Time), r.Kind, r.JobID, r.Team,
		r.Token, r.ConfigHash, string(r.Body), r.Prev, r.MAC}
}

// decodeEntry turns a stream entry back into a Record. It fails if a field is
// missing, unknown or malformed.
func decodeEntry(m redis.XMessage) (Record, error) {
	if len(m.Values) != len(fields) {
		for f := range m.Values {
			if !knownField(f) {
				return Record{}, fmt.Errorf("unknown field %q", f)
			}
		}
	}
	var v [len(fields)]string
	for i, f := range fields {
		x, ok := m.Values[f]
		if !ok {
			return Record{}, fmt.Errorf("field %q missing", f)
		}
		s, ok := x.(string)
		if !ok {
			return Record{}, fmt.Errorf("field %q: %T", f, x)
		}
		v[i] = s
	}
	r := Record{Kind: v[2], JobID: v[3], Team: v[4], Token: v[5], ConfigHash: v[6], Body: json.RawMessage(v[7]), Prev: v[8], MAC: v[9], StreamID: m.ID}
	var err error
	if r.Seq, err = strconv.ParseInt(v[0], 10, 64); err != nil {
		return Record{}, fmt.Errorf("seq %q: not a number", v[0])
	}
	if r.Time, err = time.Parse(time.RFC3339Nano, v[1]); err != nil {
		return Record{}, fmt.Errorf("time %q: %v", v[1], err)
	}
	r.Time = r.Time.UTC()
	if !json.Valid(r.Body) {
		return Record{}, errors.New("body is not valid JSON")
	}
	return r, nil
}

func knownField(f string) bool {
	for _, k := range fields {
		if f == k {
			return true
		}
	}
	return false
}

// Head returns the sequence number and MAC of the last record: (0, "") for
// an empty ledger. The MAC is what to publish; VerifyAgainst and VerifyExport
// check a ledger against it later.
func (l *Ledger) Head(ctx context.Context) (seq int64, mac string, err error) {
	vals, err := l.rdb.HMGet(ctx, l.head, "seq", "mac").Result()
	if err != nil {
		return 0, "", fmt.Errorf("ledger: head: %w", err)
	}
	h, err := l.parseHead(vals)
	return h.seq, h.mac, err
}

type headState struct {
	exists bool
	seq    int64
	mac    string
}

func (l *Ledger) parseHead(vals []any) (headState, error) {
	s, _ := vals[0].(string)
	m, _ := vals[1].(string)
	if vals[0] == nil && vals[1] == nil {
		return headState{}, nil
	}
	seq, err := strconv.ParseInt(s, 10, 64)
	if err != nil || seq < 0 || vals[1] == nil {
		return headState{}, fmt.Errorf("%w: head %s is unreadable (seq %q, mac %q)", ErrTampered, l.head, s, m)
	}
	return headState{exists: true, seq: seq, mac: m}, nil
}

// snapshot reads the head and the id of the stream's last entry in one
// transaction, so that a walk up to that id sees exactly the records the head
// covers, whatever is appended meanwhile. headErr is set when the head is
// unreadable; lastID is "" when the stream is empty.
func (l *Ledger) snapshot(ctx context.Context) (h headState, headErr error, lastID string, err error) {
	var hc *redis.SliceCmd
	var lc *redis.XMessageSliceCmd
	_, err = l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		hc = p.HMGet(ctx, l.head, "seq", "mac")
		lc = p.XRevRangeN(ctx, l.stream, "+", "-", 1)
		return nil
	})
	if err != nil {
		return h, nil, "", fmt.Errorf("ledger: read head: %w", err)
	}
	h, headErr = l.parseHead(hc.Val())
	if msgs := lc.Val(); len(msgs) > 0 {
		lastID = msgs[0].ID
	}
	return h, headErr, lastID, nil
}

// pageSize is how many entries one XRANGE reads.
const pageSize = 500

// scan calls fn for every stream entry up to and including end ("+" for all).
func (l *Ledger) scan(ctx context.Context, end string, fn func(redis.XMessage) error) error {
	start := "-"
	for {
		msgs, err := l.rdb.XRangeN(ctx, l.stream, start, end, pageSize).Result()
		if err != nil {
			return fmt.Errorf("ledger: read %s: %w", l.stream, err)
		}
		for _, m := range msgs {
			if err := fn(m); err != nil {
				return err
			}
		}
		if len(msgs) < pageSize {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// Range calls fn for every record in order, or only for job jobID's when
// jobID is not "", and stops at fn's first error, which it returns. It does
// not check MACs (Verify does); an unreadable entry stops it with ErrTampered.
func (l *Ledger) Range(ctx context.Context, jobID string, fn func(Record) error) error {
	return l.scan(ctx, "+", func(m redis.XMessage) error {
		r, err := decodeEntry(m)
		if err != nil {
			return fmt.Errorf("%w: stream entry %s is unreadable: %v", ErrTampered, m.ID, err)
		}
		if jobID != "" && r.JobID != jobID {
			return nil
		}
		return fn(r)
	})
}

// Export writes the ledger to w as JSON lines, one Record per line in order,
// up to the head as it was when Export began (records appended meanwhile are
// left for the next export), and returns that head's MAC and the number of
// records written. An unreadable entry stops it with ErrTampered; Verify
// says more.
func (l *Ledger) Export(ctx context.Context, w io.Writer) (head string, n int64, err error) {
	h, headErr, lastID, err := l.snapshot(ctx)
	if err != nil {
		return "", 0, err
	}
	if headErr != nil {
		return "", 0, headErr
	}
	if lastID == "" {
		return h.mac, 0, nil
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	err = l.scan(ctx, lastID, func(m redis.XMessage) error {
		r, err := decodeEntry(m)
		if err != nil {
			return fmt.Errorf("%w: stream entry %s is unreadable: %v", ErrTampered, m.ID, err)
		}
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("ledger: export record %d: %w", r.Seq, err)
		}
		n++
		return nil
	})
	if err != nil {
		return "", n, err
	}
	if err := bw.Flush(); err != nil {
		return "", n, fmt.Errorf("ledger: export: %w", err)
	}
	return h.mac, n, nil
}
