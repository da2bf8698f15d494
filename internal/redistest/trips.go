package redistest

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Trips is a go-redis hook that counts round trips to Redis: each command
// sent alone (a script's EVALSHA included) and each pipeline (one trip,
// however many commands it carries), and every command by name, those in
// pipelines included. Add it with client.AddHook.
type Trips struct {
	cmds, pipes atomic.Int64
	mu          sync.Mutex
	alone       map[string]int // commands sent alone, by name
	all         map[string]int // every command, by name
}

// Reset zeroes the counts.
func (c *Trips) Reset() {
	c.cmds.Store(0)
	c.pipes.Store(0)
	c.mu.Lock()
	c.alone, c.all = map[string]int{}, map[string]int{}
	c.mu.Unlock()
}

// Cmds is the commands sent alone since Reset.
func (c *Trips) Cmds() int64 { return c.cmds.Load() }

// Pipelines is the pipelines sent since Reset.
func (c *Trips) Pipelines() int64 { return c.pipes.Load() }

// Alone is the commands sent alone since Reset, by name.
func (c *Trips) Alone() map[string]int { c.mu.Lock(); defer c.mu.Unlock(); return maps.Clone(c.alone) }

// All is every command since Reset, in pipelines or not, by name.
func (c *Trips) All() map[string]int { c.mu.Lock(); defer c.mu.Unlock(); return maps.Clone(c.all) }

func (c *Trips) count(cmds []redis.Cmder, alone bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all == nil {
		c.alone, c.all = map[string]int{}, map[string]int{}
	}
	for _, cmd := range cmds {
		c.all[cmd.Name()]++
		if alone {
			c.alone[cmd.Name()]++
		}
	}
}

// DialHook is go-redis's hook: dials are not counted.
func (c *Trips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command sent alone.
func (c *Trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.cmds.Add(1)
		c.count([]redis.Cmder{cmd}, true)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline and its commands.
func (c *Trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.pipes.Add(1)
		c.count(cmds, false)
		return next(ctx, cmds)
	}
}
