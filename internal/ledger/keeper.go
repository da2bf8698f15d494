package ledger

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// AnchorKeeperConfig configures an AnchorKeeper.
type AnchorKeeperConfig struct {
	// Settle is how long Redis must have held a record (by its stream id,
	// against Redis's clock) before the keeper anchors it. Redis answers a
	// write before it reaches the disk (appendfsync everysec), so a crash
	// of Redis loses about the last second of writes; an anchor past them
	// would make that crash look like a rollback. Default (zero) 3s;
	// negative: none, for a Redis that never loses a write it answered.
	Settle time.Duration
	// Poll is how often the keeper looks at the ledger in Redis when no
	// append of this process told it to: how long the appends of other
	// processes (an AWS worker's staging records, a second scheduler's
	// decisions) may wait, beyond Settle, to be anchored. Default (zero) 1s.
	Poll time.Duration
	// Logger gets an error when Redis is behind the anchor (wiped or rolled
	// back), once per finding. Default slog.Default().
	Logger *slog.Logger
}

// AnchorKeeper moves a ledger's anchor (WithAnchor) forward as records are
// appended: Settle after each append this process makes (Ledger.Appended;
// appends meanwhile share the write), and every Poll for the appends of
// other processes, it reads the ledger in Redis and anchors its last
// record that has settled, when that is past the anchor (Flush). It never
// writes a lower record over a higher one, and never moves the anchor on
// while Redis no longer holds the anchored record, so once Redis is wiped
// or rolled back the anchor stays where it was and Verify fails until an
// operator runs Reanchor.
//
// The anchor lags Redis by about Settle for this process's appends and
// Settle + Poll for other processes': records appended within that window
// and then lost with a wipe or a rollback are not noticed (doc.go, "The
// anchor").
type AnchorKeeper struct {
	l    *Ledger
	a    *Anchor
	cfg  AnchorKeeperConfig
	log  *slog.Logger
	kick chan struct{}

	mu    sync.Mutex // one Flush at a time; guards alarm
	alarm string     // the last finding logged, "" when none

	started  atomic.Bool
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// NewAnchorKeeper returns the keeper of l's anchor, which l tells of its
// appends from now on. It fails if l has no anchor (WithAnchor). One
// keeper per Ledger.
func NewAnchorKeeper(l *Ledger, cfg AnchorKeeperConfig) (*AnchorKeeper, error) {
	if l.anchor == nil {
		return nil, errors.New("ledger: anchor keeper: the ledger has no anchor (WithAnchor)")
	}
	if cfg.Settle == 0 {
		cfg.Settle = 3 * time.Second
	}
	if cfg.Settle < 0 {
		cfg.Settle = 0
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	k := &AnchorKeeper{l: l, a: l.anchor, cfg: cfg, log: cfg.Logger.With(slog.String("anchor", l.anchor.Path())),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	notify := func() {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
	l.appended.Store(&notify)
	return k, nil
}

// Start anchors the head in Redis once (logging what it finds), then keeps
// the anchor in the background until Stop, not until ctx ends: the last
// write must come after the last append, which the scheduler's own Stop
// makes.
func (k *AnchorKeeper) Start(ctx context.Context) error {
	if !k.started.CompareAndSwap(false, true) {
		return errors.New("ledger: anchor keeper: already started")
	}
	k.flushAndLog(ctx)
	go k.run()
	return nil
}

// Stop anchors the head one last time and ends the keeper. It is safe to
// call twice, and without Start.
func (k *AnchorKeeper) Stop(ctx context.Context) error {
	if !k.started.Load() {
		return nil
	}
	k.stopOnce.Do(func() { close(k.stop) })
	select {
	case <-k.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ledger: anchor keeper: stop: %w", ctx.Err())
	}
}

// flushTimeout bounds one Flush of the background loop.
const flushTimeout = 5 * time.Second

// settleMargin is how long after Settle a notice's records are looked
// for: the clocks' rounding to the millisecond, and appends just after it.
const settleMargin = 50 * time.Millisecond

func (k *AnchorKeeper) run() {
	defer close(k.done)
	final := func() {
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		k.flushAndLog(ctx)
	}
	poll := time.NewTimer(k.cfg.Poll)
	defer poll.Stop()
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	var dueAt, lastKick time.Time // dueAt zero: no flush due for a notice
	for {
		select {
		case <-k.stop:
			final()
			return
		case <-k.kick:
			lastKick = time.Now()
			if dueAt.IsZero() {
				dueAt = lastKick.Add(k.cfg.Settle + settleMargin)
				due.Reset(time.Until(dueAt))
			}
			continue
		case <-poll.C:
		case <-due.C:
		}
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		k.flushAndLog(ctx)
		cancel()
		due.Stop()
		dueAt = time.Time{}
		if !lastKick.IsZero() && lastKick.Add(k.cfg.Settle+settleMargin).After(began) {
			// A notice whose records had not settled when this flush began.
			dueAt = lastKick.Add(k.cfg.Settle + settleMargin)
			due.Reset(time.Until(dueAt))
		}
		poll.Reset(k.cfg.Poll)
	}
}

// flushAndLog runs Flush and logs a finding once, when it changes.
func (k *AnchorKeeper) flushAndLog(ctx context.Context) {
	st, err := k.Flush(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == k.alarm {
		return
	}
	k.alarm = msg
	switch {
	case err == nil:
		k.log.Info("ledger anchored", slog.Int64("seq", st.Seq), slog.String("mac", short(st.MAC)))
	case errors.Is(err, ErrTampered):
		k.log.Error("the ledger in Redis does not match its anchor; the anchor stays where it is and lathe audit verify fails until an operator re-anchors it (docs/operations.md)",
			slog.String("error", msg))
	default:
		k.log.Warn("could not anchor the ledger", slog.String("error", msg))
	}
}

// Flush anchors the ledger's last record that has settled (Settle) now,
// if it is past the anchor, and returns the anchor as it then is. It
// writes nothing, and returns an error wrapping ErrTampered, when Redis is
// behind the anchor, no longer holds the anchored record, or ends in a
// record not made with the key; other errors are for reading Redis or the
// file.
func (k *AnchorKeeper) Flush(ctx context.Context) (AnchorState, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cur, _, err := k.a.Load()
	if err != nil {
		return cur, err
	}
	tip, err := k.l.readTip(ctx, cur.StreamID, k.cfg.Settle)
	if err != nil {
		return cur, err
	}
	if tip.headErr != nil {
		return cur, tip.headErr
	}
	if tip.head.seq < cur.Seq {
		return cur, fmt.Errorf("%w: %s", ErrTampered, behindAnchor(tip.head.seq, k.a.Path(), cur))
	}
	if cur.Seq > 0 {
		r, derr := decodeOne(tip.anchored)
		if derr != nil || r.Seq != cur.Seq || r.MAC != cur.MAC {
			return cur, fmt.Errorf("%w: record %d, anchored in %s with MAC %s at stream id %s, is no longer in Redis as anchored: Redis was wiped or rolled back and written again",
				ErrTampered, cur.Seq, k.a.Path(), short(cur.MAC), cur.StreamID)
		}
	}
	if len(tip.settled) == 0 {
		return cur, nil // nothing has settled yet
	}
	r, derr := decodeOne(tip.settled)
	if derr != nil || r.Seq > tip.head.seq || !hmac.Equal([]byte(ComputeMAC(k.l.key, r)), []byte(r.MAC)) {
		return cur, fmt.Errorf("%w: stream entry %s is not a record made with the key: not anchored (run lathe audit verify)",
			ErrTampered, tip.settled[0].ID)
	}
	if r.Seq <= cur.Seq {
		return cur, nil
	}
	next := AnchorState{Seq: r.Seq, MAC: r.MAC, StreamID: r.StreamID, Time: k.l.now().UTC().Round(0)}
	prev, wrote, err := k.a.store(next, false)
	if err != nil {
		return cur, err
	}
	if !wrote {
		return prev, nil // another process anchored as far or further
	}
	return next, nil
}

// tip is the head in Redis, the stream's last entry that has settled and
// the entry at an anchored stream id, read together.
type tip struct {
	head     headState
	headErr  error
	settled  []redis.XMessage
	anchored []redis.XMessage
}

// readTip reads the head, the stream's last entry added at least settle
// ago by Redis's clock and, when anchoredID is not "", the entry with that
// id. The head, the stream's first entry and the anchored one come in one
// transaction (after a TIME, when settle is not 0); the settled entry, when
// the first one has settled, in a second call (it was there when the head
// was read, being older). XREVRANGE from an id older than every entry
// walks the whole stream (about 4 ms for 12,000 records, Redis 7.0), so it
// is only asked once an entry is known to be old enough.
func (l *Ledger) readTip(ctx context.Context, anchoredID string, settle time.Duration) (tip, error) {
	var cutoff int64 // the newest stream id time (ms) that has settled
	if settle > 0 {
		now, err := l.rdb.Time(ctx).Result()
		if err != nil {
			return tip{}, fmt.Errorf("ledger: anchor: read Redis's clock: %w", err)
		}
		cutoff = now.Add(-settle).UnixMilli()
	}
	var hc *redis.SliceCmd
	var fc, ac *redis.XMessageSliceCmd
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		hc = p.HMGet(ctx, l.head, "seq", "mac")
		if settle > 0 {
			fc = p.XRangeN(ctx, l.stream, "-", "+", 1)
		} else {
			fc = p.XRevRangeN(ctx, l.stream, "+", "-", 1) // the last: all have settled
		}
		if anchoredID != "" {
			ac = p.XRangeN(ctx, l.stream, anchoredID, anchoredID, 1)
		}
		return nil
	})
	if err != nil {
		return tip{}, fmt.Errorf("ledger: anchor: read head: %w", err)
	}
	var t tip
	t.head, t.headErr = l.parseHead(hc.Val())
	if ac != nil {
		t.anchored = ac.Val()
	}
	if settle <= 0 {
		t.settled = fc.Val()
		return t, nil
	}
	if first := fc.Val(); len(first) == 0 || streamIDTime(first[0].ID) > cutoff {
		return t, nil // nothing has settled yet
	}
	if t.settled, err = l.rdb.XRevRangeN(ctx, l.stream, strconv.FormatInt(cutoff, 10), "-", 1).Result(); err != nil {
		return tip{}, fmt.Errorf("ledger: anchor: read %s: %w", l.stream, err)
	}
	return t, nil
}

// streamIDTime is the time part (ms) of stream id id, -1 when it has none.
func streamIDTime(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// decodeOne decodes the one entry of msgs.
func decodeOne(msgs []redis.XMessage) (Record, error) {
	if len(msgs) != 1 {
		return Record{}, errors.New("no entry")
	}
	return decodeEntry(msgs[0])
}

// behindAnchor says that the ledger in Redis ends at record n, before the
// anchor st in the file at path.
func behindAnchor(n int64, path string, st AnchorState) string {
	where := fmt.Sprintf("ends at record %d", n)
	if n == 0 {
		where = "is empty"
	}
	return fmt.Sprintf("the ledger in Redis %s, but the anchor in %s says record %d with MAC %s (anchored %s): Redis was wiped or rolled back",
		where, path, st.Seq, short(st.MAC), st.Time.Format(time.RFC3339))
}
