package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/worker/runner"
)

const (
	flushEvery   = 100 * time.Millisecond
	flushBatch   = 64
	maxBuffered  = 10000 // log lines beyond this (Redis away) are counted, not kept
	lastLogLines = 8
)

// eventSink receives the trainer's output (runner.Sink), keeps the latest
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
	metricsM map[string]float64
	arts     []runner.TrainerEvent
	logs     []string
	kick     chan struct{}
	onStart  func(pid int) // called once the trainer started (pidfile)
	progress atomic.Int64  // unix ms of the last progress line (or the start)
	steps    atomic.Int64  // the last progress line's step, and the first one's
	first    atomic.Int64
	done     chan struct{}
	closed   chan struct{}
}

var _ runner.Sink = (*eventSink)(nil)

func newEventSink(store *jobstore.Store, id string, attempt int, log *slog.Logger, cancel context.CancelCauseFunc) *eventSink {
	return &eventSink{store: store, id: id, attempt: attempt, log: log, cancel: cancel,
		metricsM: map[string]float64{}, kick: make(chan struct{}, 1), done: make(chan struct{}), closed: make(chan struct{})}
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

// Event turns a contract line into a stream event and record updates.
func (s *eventSink) Event(ev runner.TrainerEvent) {
	in := jobstore.EventIn{Type: ev.Kind, Data: ev.Raw}
	switch ev.Kind {
	case runner.EventProgress:
		s.progress.Store(time.Now().UnixMilli())
		s.steps.Store(int64(ev.Step))
		s.first.CompareAndSwap(0, int64(ev.Step))
		p := jobtype.Progress{Step: ev.Step, TotalSteps: ev.TotalSteps, Epoch: ev.Epoch, Loss: ev.Loss,
			LearningRate: ev.LearningRate, SamplesPerS: ev.SamplesPerS}
		b, _ := json.Marshal(p)
		in.Field, in.Value = "progress", string(b)
	case runner.EventEval:
		s.mu.Lock()
		s.metricsM["eval_loss"] = ev.EvalLoss
		b, _ := json.Marshal(s.metricsM)
		s.mu.Unlock()
		in.Field, in.Value = "metrics", string(b)
	case runner.EventDone:
		s.mu.Lock()
		for k, v := range ev.Metrics {
			s.metricsM[k] = v
		}
		b, _ := json.Marshal(s.metricsM)
		s.mu.Unlock()
		in.Field, in.Value = "metrics", string(b)
	case runner.EventArtifact:
		s.mu.Lock()
		s.arts = append(s.arts, ev)
		s.mu.Unlock()
	case runner.EventCheckpoint:
	default:
		// An event kind the contract does not define: keep it as a log line.
		s.Log("stdout", string(ev.Raw))
		return
	}
	if len(in.Data) == 0 {
		in.Data = json.RawMessage(`{}`)
	}
	s.add(in)
}

// Log keeps a non-event line as a log event.
func (s *eventSink) Log(stream, line string) {
	s.mu.Lock()
	s.logs = append(s.logs, line)
	if len(s.logs) > lastLogLines {
		s.logs = s.logs[len(s.logs)-lastLogLines:]
	}
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
				s.cancel(runner.ErrCancelled)
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
	out := make(map[string]float64, len(s.metricsM))
	for k, v := range s.metricsM {
		out[k] = v
	}
	return out
}

func (s *eventSink) artifacts() []runner.TrainerEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]runner.TrainerEvent(nil), s.arts...)
}

func (s *eventSink) lastLogs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.logs) == 0 {
		return "(no output)"
	}
	return strings.Join(s.logs, " | ")
}

func mustRaw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}
