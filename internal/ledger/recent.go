package ledger

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// TeamIndexMax is how many stream ids a team's index keeps (the newest):
// how far back Recent looks for one team's records.
const TeamIndexMax = 1000

// RecentMax is how many entries Recent reads at most, for every team (the
// stream) or for one (its index), however few of them keep takes.
const RecentMax = 1000

// isStreamID reports whether id is a Redis stream id, <ms>-<seq> in
// digits. A loop, not a regexp compiled at init, which every program that
// links the ledger (the lathe CLI) would pay for at each start.
func isStreamID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	return ok && allDigits(ms) && allDigits(seq)
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Recent returns up to n records that keep takes (nil: all), newest first,
// from the newest RecentMax records: of team's only (its index, written by
// LuaAppend's ledger_write; a record there of another team is skipped), or
// of every team's when team is "". It does not check MACs (Verify does);
// an unreadable entry stops it with ErrTampered. Records appended before
// the team index existed are not in it.
//
// Redis: for every team, one XREVRANGE per page of max(2n, 50) entries
// until n are found; for a team, one LRANGE of its index and one pipeline
// of an XRANGE per id, per page.
func (l *Ledger) Recent(ctx context.Context, team string, n int, keep func(Record) bool) ([]Record, error) {
	out := []Record{}
	if n <= 0 {
		return out, nil
	}
	if keep == nil {
		keep = func(Record) bool { return true }
	}
	page := max(2*n, 50)
	take := func(msgs []redis.XMessage) (bool, error) {
		for _, m := range msgs {
			r, err := decodeEntry(m)
			if err != nil {
				return false, fmt.Errorf("%w: stream entry %s is unreadable: %v", ErrTampered, m.ID, err)
			}
			if (team == "" || r.Team == team) && keep(r) {
				out = append(out, r)
				if len(out) >= n {
					return true, nil
				}
			}
		}
		return false, nil
	}
	var err error
	if team == "" {
		err = l.recentAll(ctx, page, take)
	} else {
		err = l.recentTeam(ctx, team, page, take)
	}
	return out, err
}

// recentAll hands take the stream's entries, newest first, a page at a
// time, until take is done or RecentMax were read.
func (l *Ledger) recentAll(ctx context.Context, page int, take func([]redis.XMessage) (bool, error)) error {
	before := "+"
	for read := 0; read < RecentMax; {
		count := min(page, RecentMax-read)
		msgs, err := l.rdb.XRevRangeN(ctx, l.stream, before, "-", int64(count)).Result()
		if err != nil {
			return fmt.Errorf("ledger: read %s: %w", l.stream, err)
		}
		if done, err := take(msgs); done || err != nil {
			return err
		}
		if len(msgs) < count {
			return nil
		}
		read += len(msgs)
		before = "(" + msgs[len(msgs)-1].ID
	}
	return nil
}

// recentTeam hands take the entries team's index names, newest first, a
// page at a time, until take is done or the index (at most RecentMax ids)
// is read. An id whose entry is gone is skipped (Verify reports the gap).
func (l *Ledger) recentTeam(ctx context.Context, team string, page int, take func([]redis.XMessage) (bool, error)) error {
	index := l.stream + ":team:" + team
	for start := 0; start < RecentMax; start += page {
		stop := min(start+page, RecentMax) - 1
		ids, err := l.rdb.LRange(ctx, index, int64(start), int64(stop)).Result()
		if err != nil {
			return fmt.Errorf("ledger: read %s: %w", index, err)
		}
		if len(ids) == 0 {
			return nil
		}
		pipe := l.rdb.Pipeline()
		cmds := make([]*redis.XMessageSliceCmd, len(ids))
		for i, id := range ids {
			if !isStreamID(id) {
				id = "0-0" // not a stream id (the index was written by hand): names nothing
			}
			cmds[i] = pipe.XRangeN(ctx, l.stream, id, id, 1)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("ledger: read %s by %s: %w", l.stream, index, err)
		}
		var msgs []redis.XMessage
		for _, c := range cmds {
			msgs = append(msgs, c.Val()...)
		}
		if done, err := take(msgs); done || err != nil {
			return err
		}
		if len(ids) < stop-start+1 {
			return nil
		}
	}
	return nil
}
