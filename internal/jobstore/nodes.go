package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/poolstate"
)

// Node is a worker's heartbeat (poolstate.Node).
type Node = poolstate.Node

// ErrNodeTaken: another live worker holds this node name.
var ErrNodeTaken = errors.New("node name is held by another live worker")

// HeartbeatOptions says how Heartbeat records a node.
type HeartbeatOptions struct {
	// TTL is how long the heartbeat lives without the next one.
	TTL time.Duration
	// First marks an incarnation's first heartbeat: it fails with
	// ErrNodeTaken when a different incarnation's heartbeat is still alive,
	// unless PredecessorDead (nil: never) says that incarnation's process is
	// gone (same host, pid no longer running).
	First           bool
	PredecessorDead func(Node) bool
}

// Heartbeat records n with a TTL (o says how).
func (s *Store) Heartbeat(ctx context.Context, n Node, o HeartbeatOptions) error {
	n.SeenAt = s.now().UTC()
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("jobstore: heartbeat %s: %w", n.Name, err)
	}
	key := s.key("node", n.Name)
	if o.First {
		prev, err := s.rdb.Get(ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("jobstore: heartbeat %s: %w", n.Name, err)
		}
		if err == nil {
			var p Node
			dead := false
			if json.Unmarshal([]byte(prev), &p) == nil && o.PredecessorDead != nil {
				dead = o.PredecessorDead(p)
			}
			if p.Incarnation != n.Incarnation && !dead {
				return fmt.Errorf("jobstore: heartbeat %s (incarnation %s, last seen %s): %w", n.Name, p.Incarnation, p.SeenAt.Format(time.RFC3339), ErrNodeTaken)
			}
		}
	}
	pipe := s.rdb.TxPipeline()
	pipe.Set(ctx, key, b, o.TTL)
	pipe.SAdd(ctx, s.key("nodes"), n.Name)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("jobstore: heartbeat %s: %w", n.Name, err)
	}
	return nil
}

// RemoveNode deletes a node's heartbeat (clean shutdown) if it is still ours.
func (s *Store) RemoveNode(ctx context.Context, name, incarnation string) error {
	key := s.key("node", name)
	prev, err := s.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("jobstore: remove node %s: %w", name, err)
	}
	var p Node
	if json.Unmarshal([]byte(prev), &p) == nil && p.Incarnation == incarnation {
		if err := s.rdb.Del(ctx, key).Err(); err != nil {
			return fmt.Errorf("jobstore: remove node %s: %w", name, err)
		}
	}
	return nil
}

// NodeStatus is a live node with its reservations (poolstate.NodeStatus).
type NodeStatus = poolstate.NodeStatus

// Reservation is one job's hold on a node (poolstate.Reservation).
type Reservation = poolstate.Reservation

// parseReservation reads a reservation value: {"a":attempt,"g":[…]}, or a
// bare attempt number as written before GPU placement (a CPU slot).
func parseReservation(v string) Reservation {
	var r Reservation
	if json.Unmarshal([]byte(v), &r) != nil {
		n, _ := strconv.Atoi(v)
		r = Reservation{Attempt: n}
	}
	return r
}

// Nodes returns the live nodes (heartbeat not expired), sorted by name,
// with their reservations.
func (s *Store) Nodes(ctx context.Context) ([]NodeStatus, error) {
	names, err := s.rdb.SMembers(ctx, s.key("nodes")).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: nodes: %w", err)
	}
	return s.nodesNamed(ctx, names)
}

// nodesNamed reads the nodes the nodes set names (Nodes).
func (s *Store) nodesNamed(ctx context.Context, names []string) ([]NodeStatus, error) {
	if len(names) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(names))
	res := make([]*redis.MapStringStringCmd, len(names))
	for i, n := range names {
		gets[i] = pipe.Get(ctx, s.key("node", n))
		res[i] = pipe.HGetAll(ctx, s.key("node", n, "reserved"))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: nodes: %w", err)
	}
	var out []NodeStatus
	var gone []any
	for i := range names {
		v, err := gets[i].Result()
		if errors.Is(err, redis.Nil) {
			gone = append(gone, names[i]) // heartbeat expired; a live worker adds itself back
			continue
		}
		if err != nil {
			continue
		}
		var n Node
		if err := json.Unmarshal([]byte(v), &n); err != nil {
			continue
		}
		ns := NodeStatus{Node: n, Reservations: map[string]Reservation{}}
		for id, v := range res[i].Val() {
			r := parseReservation(v)
			ns.Reservations[id] = r
			ns.Reserved++
			if len(r.GPUs) == 0 {
				ns.CPUReserved++
			}
		}
		out = append(out, ns)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	if len(gone) > 0 {
		_ = s.rdb.SRem(ctx, s.key("nodes"), gone...).Err() // best effort: the set only lists names to look at
	}
	return out, nil
}
