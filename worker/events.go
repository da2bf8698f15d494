package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/trainer"
)

const (
	flushEvery  = 100 * time.Millisecond
	flushBatch  = 64
	maxBuffered = 10000 // log lines beyond this (Redis away) are counted, not kept
)

// eventSink receives the trainer's output (trainer.Sink), keeps the latest
// progress, metrics and artifacts, and writes events to the job's stream in
// batches (one Lua call per batch). It stops the attempt when the store says
// a cancel was asked or the attempt is no longer ours.
type eventSink struct {
	store   *jobstore.Store
	id      string
	attempt int
	log     *slog.Logger
	cancel  context.CancelCauseFunc

	mu       sync.Mutex
	buf      []jobstore.EventIn
	dropped  int
	rec      *trainer.Record // under mu
	kick     chan struct{}
	onStart  func(pid int) // called once the trainer started (pidfile)
	progress atomic.Int64  // unix ms of the last progress line (or the start)
	steps    atomic.Int64  // the last progress line's step, and the first one's
	first    atomic.Int64
	done     chan struct{}
	closed   chan struct{}
}

var _ trainer.Sink = (*eventSink)(nil)

func newEventSink(store *jobstore.Store, id string, attempt int, log *slog.Logger, cancel context.CancelCauseFunc) *eventSink {
	return &eventSink{store: store, id: id, attempt: attempt, log: log, cancel: cancel,
		rec: trainer.NewRecord(nil), kick: make(chan struct{}, 1), done: make(chan struct{}), closed: make(chan struct{})}
}

func (s *eventSink) add(e jobstore.EventIn) {
	s.mu.Lock()
	if len(s.buf) >= maxBuffered && e.Type == jobtype.EventLog {
		s.dropped++
		s.mu.Unlock()
		return
	}
	e.Time = time.Now()
	s.buf = append(s.buf, e)
	n := len(s.buf)
	s.mu.Unlock()
	if n >= flushBatch {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// Started records that the trainer process started (the start latency
// benchmark reads this event's time).
func (s *eventSink) Started(pid int) {
	s.progress.Store(time.Now().UnixMilli())
	if s.onStart != nil {
		s.onStart(pid)
	}
	s.add(jobstore.EventIn{Type: "started", Data: mustRaw(map[string]any{"pid": pid})})
}

// Event turns a contract line into a stream event and the record update
// trainer.Record makes of it.
func (s *eventSink) Event(ev trainer.TrainerEvent) {
	if !ev.Known() {
		// An event kind the contract does not define: keep it as a log line.
		s.Log("stdout", string(ev.Raw))
		return
	}
	if ev.Kind == trainer.EventProgress {
		s.progress.Store(time.Now().UnixMilli())
		s.steps.Store(int64(ev.Step))
		s.first.CompareAndSwap(0, int64(ev.Step))
	}
	s.mu.Lock()
	u := s.rec.Apply(ev)
	s.mu.Unlock()
	s.add(recordEvent(jobstore.EventIn{Type: ev.Kind, Data: ev.Raw}, u))
}

// recordEvent is in carrying the record update u (the local sink and the
// AWS worker's mirror), with an empty object for data when it has none.
func recordEvent(in jobstore.EventIn, u trainer.Update) jobstore.EventIn {
	switch {
	case u.Progress != nil:
		in = in.WithProgress(*u.Progress)
	case u.Metrics != nil:
		in = in.WithMetrics(u.Metrics)
	}
	if len(in.Data) == 0 {
		in.Data = json.RawMessage(`{}`)
	}
	return in
}

// Log keeps a non-event line as a log event.
func (s *eventSink) Log(stream, line string) {
	s.mu.Lock()
	s.rec.Log(line)
	s.mu.Unlock()
	s.add(jobstore.EventIn{Type: jobtype.EventLog, Data: mustRaw(jobtype.LogLine{Stream: stream, Line: line})})
}

func (s *eventSink) loop() {
	defer close(s.closed)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			s.flush(true)
			return
		case <-t.C:
		case <-s.kick:
		}
		s.flush(false)
	}
}

// flush writes buffered events; on the final flush it retries for a while
// so the tail of the run is not lost to a Redis blip.
func (s *eventSink) flush(final bool) {
	tries := 1
	if final {
		tries = 10
	}
	for i := 0; i < tries; i++ {
		s.mu.Lock()
		batch := s.buf
		if s.dropped > 0 {
			batch = append(batch, jobstore.EventIn{Type: jobtype.EventLog, Time: time.Now(),
				Data: mustRaw(jobtype.LogLine{Stream: "lathe", Line: fmt.Sprintf("%d log lines dropped while Redis was unreachable", s.dropped)})})
		}
		s.buf, s.dropped = nil, 0
		s.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cancelReq, err := s.store.Append(ctx, s.id, s.attempt, batch)
		cancel()
		switch {
		case err == nil:
			if cancelReq {
				s.cancel(trainer.ErrCancelled)
			}
			return
		case errors.Is(err, jobstore.ErrConflict) || errors.Is(err, jobstore.ErrNotFound):
			s.log.Warn("the store no longer has this attempt running; stopping it", slog.Any("err", err))
			s.cancel(errLost)
			return
		default:
			s.log.Warn("writing events failed; will retry", slog.Any("err", err))
			s.mu.Lock()
			s.buf = append(batch, s.buf...) // keep order; the dropped note is re-added if it was there
			s.mu.Unlock()
			if final {
				time.Sleep(time.Duration(i+1) * 200 * time.Millisecond)
			} else {
				return
			}
		}
	}
}

// close flushes what is left and stops the loop.
func (s *eventSink) close() {
	close(s.done)
	<-s.closed
}

func (s *eventSink) metrics() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.Metrics()
}

// pausedAt is the done line's paused_at (0: none).
func (s *eventSink) pausedAt() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.PausedAt()
}

func (s *eventSink) artifacts() []trainer.TrainerEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.Artifacts()
}

func (s *eventSink) lastLogs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.LastLogs()
}

func mustRaw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}
