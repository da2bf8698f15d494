package jobstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// JobCache keeps the job records GetManyCached decoded, each with the
// stored fields it was decoded from, so that a later read decodes again
// only the records whose fields changed. It is for a reader that reads the
// same records again and again (the placer reads every queued job each
// round). It is not safe for concurrent use; its zero value is empty and
// ready.
type JobCache struct {
	jobs map[string]cachedJob
}

// cachedJob is a decoded record and its jobFields as read ("" for a field
// not set, as decodeJob reads it).
type cachedJob struct {
	fields []string
	job    *jobtype.Job
}

// Len is how many records c holds.
func (c *JobCache) Len() int { return len(c.jobs) }

// jobFieldIndex is each of jobFields' index.
var jobFieldIndex = func() map[string]int {
	out := make(map[string]int, len(jobFields))
	for i, f := range jobFields {
		out[f] = i
	}
	return out
}()

// GetManyCached is GetMany through c. Every record of ids is read from
// Redis, whole (an HGETALL each, in one pipeline: two arguments a job
// where GetMany's HMGET sends every field's name); a record whose every
// field of jobFields is the same string as when c last decoded it is not
// decoded again: c's job is returned, which is what decoding it would
// give, as decodeJob is a function of the id and those strings alone.
// Whatever wrote the record (a script, an HSET of one field, updated_at
// bumped or not), a changed field is a new decode: nothing here trusts a
// version.
//
// The jobs returned may be shared with c and with earlier calls' results:
// callers must not modify them (a copy to change, as policy.DecideRound
// does). After the call c holds the records of ids that exist, and no
// others (a job that left ids is forgotten). On an error c is left as it
// was. A nil c is no cache: GetMany.
func (s *Store) GetManyCached(ctx context.Context, c *JobCache, ids []string) ([]*jobtype.Job, error) {
	if c == nil {
		return s.GetMany(ctx, ids)
	}
	if len(ids) == 0 {
		c.jobs = nil
		return []*jobtype.Job{}, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, s.key("job", id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("jobstore: get many: %w", err)
	}
	next := make(map[string]cachedJob, len(ids))
	out := make([]*jobtype.Job, 0, len(ids))
	fields := make([]string, len(jobFields)) // the record read, by jobFields' index
	for i, id := range ids {
		if e, ok := next[id]; ok { // named twice
			out = append(out, e.job)
			continue
		}
		clear(fields)
		for k, v := range cmds[i].Val() {
			if f, ok := jobFieldIndex[k]; ok {
				fields[f] = v
			}
		}
		if e, ok := c.jobs[id]; ok && slices.Equal(e.fields, fields) {
			next[id] = e
			out = append(out, e.job)
			continue
		}
		vals := make([]any, len(fields))
		for f, v := range fields {
			vals[f] = v
		}
		j, err := decodeJob(id, vals)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		next[id] = cachedJob{fields: slices.Clone(fields), job: j}
		out = append(out, j)
	}
	c.jobs = next
	return out, nil
}
