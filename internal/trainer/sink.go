package trainer

// Stream names passed to Sink.Log.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Sink receives what a trainer reports. Run calls it from its own goroutines,
// one call at a time (never concurrently), and makes no call after Run has
// returned. A slow sink slows the trainer down once its pipe buffers fill, and
// cannot hold up a cancel past Config.KillGrace.
type Sink interface {
	// Started is called once, right after the trainer process started and
	// before any other call. pid is also the process group id.
	Started(pid int)
	// Event is called for each stdout line that is a JSON object with a
	// non-empty string "event" field, including kinds the contract does not
	// define (see TrainerEvent.Known); the caller decides what to do with
	// those.
	Event(ev TrainerEvent)
	// Log is called for every other stdout line and every stderr line, with
	// stream StreamStdout or StreamStderr. line has no trailing newline and
	// is valid UTF-8.
	Log(stream, line string)
}

// discardSink is the Sink used when Run is given nil.
type discardSink struct{}

func (discardSink) Started(int)        {}
func (discardSink) Event(TrainerEvent) {}
func (discardSink) Log(string, string) {}
