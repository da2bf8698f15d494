package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"
)

// EventLine is one line of an events batch (see the package doc).
type EventLine struct {
	// T is when the agent read the line, in Unix milliseconds.
	T int64 `json:"t"`
	// Type is progress, eval, checkpoint, artifact, done or log.
	Type string `json:"type"`
	// Data is the trainer's JSON line for an event, or
	// {"stream":…,"line":…} for a log line.
	Data json.RawMessage `json:"data"`
}

// TypeLog is EventLine.Type of a log line.
const TypeLog = "log"

// StreamAgent is the stream of the agent's own log lines in the events.
const StreamAgent = "agent"

// eventsPutTimeout bounds one events batch upload.
const eventsPutTimeout = 30 * time.Second

// maxBufferedLines bounds the lines held while S3 is unreachable; log lines
// beyond it are counted and dropped (events are always kept).
const maxBufferedLines = 200000

// eventUploader cuts the lines it is given into numbered batches and puts
// each batch under events/ once, in order.
type eventUploader struct {
	st       ObjectStore
	uri      JobURI
	log      *slog.Logger
	lines    int
	interval time.Duration

	mu      sync.Mutex
	buf     bytes.Buffer // lines not yet in a batch
	n       int          // lines in buf
	held    int          // lines in buf and pending
	dropped int
	pending [][]byte // batches cut, not yet uploaded, in order
	seq     int      // number of the next batch to upload
	kick    chan struct{}

	stop    chan struct{}
	stopped chan struct{}
}

func newEventUploader(st ObjectStore, uri JobURI, lines int, interval time.Duration, log *slog.Logger) *eventUploader {
	return &eventUploader{st: st, uri: uri, log: log, lines: lines, interval: interval, seq: 1,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
}

// add queues one line. It never blocks on S3.
func (u *eventUploader) add(typ string, data json.RawMessage) {
	b, err := json.Marshal(EventLine{T: time.Now().UnixMilli(), Type: typ, Data: data})
	if err != nil { // data is not valid JSON: keep it as a log line
		b, _ = json.Marshal(EventLine{T: time.Now().UnixMilli(), Type: TypeLog, Data: logData("stdout", string(data))})
	}
	u.mu.Lock()
	if typ == TypeLog && u.held >= maxBufferedLines {
		u.dropped++
		u.mu.Unlock()
		return
	}
	u.buf.Write(b)
	u.buf.WriteByte('\n')
	u.n++
	u.held++
	full := u.n >= u.lines
	u.mu.Unlock()
	if full {
		select {
		case u.kick <- struct{}{}:
		default:
		}
	}
}

// note adds one of the agent's own log lines.
func (u *eventUploader) note(line string) { u.add(TypeLog, logData(StreamAgent, line)) }

func logData(stream, line string) json.RawMessage {
	b, _ := json.Marshal(struct {
		Stream string `json:"stream"`
		Line   string `json:"line"`
	}{stream, line})
	return b
}

// cut moves the buffered lines into batches of at most u.lines lines.
func (u *eventUploader) cut() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for u.n > 0 {
		data := u.buf.Bytes()
		end, k := 0, 0
		for k < u.lines {
			i := bytes.IndexByte(data[end:], '\n')
			if i < 0 {
				break
			}
			end += i + 1
			k++
		}
		u.pending = append(u.pending, bytes.Clone(data[:end]))
		u.buf.Next(end)
		u.n -= k
	}
	if u.dropped > 0 {
		b, _ := json.Marshal(EventLine{T: time.Now().UnixMilli(), Type: TypeLog,
			Data: logData(StreamAgent, "log lines dropped while S3 was unreachable: "+itoa(u.dropped))})
		u.pending = append(u.pending, append(b, '\n'))
		u.held++
		u.dropped = 0
	}
}

// upload puts the pending batches in order; it stops at the first failure,
// keeping that batch and its number for the next try.
func (u *eventUploader) upload(ctx context.Context) error {
	for {
		u.mu.Lock()
		if len(u.pending) == 0 {
			u.mu.Unlock()
			return nil
		}
		b, seq := u.pending[0], u.seq
		u.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, eventsPutTimeout)
		err := u.st.Put(pctx, u.uri.Bucket, u.uri.EventsKey(seq), bytes.NewReader(b), int64(len(b)))
		cancel()
		if err != nil {
			return err
		}
		u.mu.Lock()
		u.pending = u.pending[1:]
		u.seq++
		u.held -= bytes.Count(b, []byte{'\n'})
		u.mu.Unlock()
	}
}

// loop cuts and uploads every interval, or sooner when a batch is full,
// until close.
func (u *eventUploader) loop(ctx context.Context) {
	defer close(u.stopped)
	t := time.NewTicker(u.interval)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-u.stop:
			return
		case <-t.C:
		case <-u.kick:
		}
		u.cut()
		if err := u.upload(ctx); err != nil {
			if fails%10 == 0 {
				u.log.Warn("events upload failed; will retry", slog.Any("error", err))
			}
			fails++
		}
	}
}

// close stops the loop and uploads what is left, trying a few times.
func (u *eventUploader) close(ctx context.Context) error {
	close(u.stop)
	<-u.stopped
	u.cut()
	return retry(ctx, 5, u.upload)
}

// batches is the number of batches uploaded so far.
func (u *eventUploader) batches() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seq - 1
}
