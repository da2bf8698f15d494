package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/wire"
)

// A job's long responses: its events, followed as they come (SSE), and
// its published artifacts, read from its output folder.

// streams serves a job's events and artifacts.
type streams struct{ *Server }

func (s streams) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	after, from := r.URL.Query().Get("after"), "after"
	if after == "" {
		after, from = r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	}
	if after != "" && !validStreamID(after) {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad " + from, Code: "invalid",
			Fields: []jobspec.FieldError{{Field: from, Value: after, Message: "must be an event id (MS or MS-SEQ, as an event's id)"}}})
		return
	}
	follow, ok := boolParam(w, r, "follow")
	if !ok {
		return
	}
	ctx, cancel := s.rctx(r)
	job, ok := s.readJob(ctx, w, r, id)
	cancel()
	if !ok {
		return
	}
	if !follow {
		ctx, cancel := s.rctx(r)
		defer cancel()
		evs, err := s.store.Events(ctx, id, after, 10000)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, wire.EventList{Events: evs})
		return
	}
	s.followEvents(w, r, id, after, job.State.Terminal())
}

// followEvents streams job id's events after the stream id after as
// server-sent events, until the job is terminal (terminal: it already
// was) and its last event is sent, or the client goes. The stream
// outlives the server's read and write timeouts: each write gets its own
// deadline, and a failed write (the client is gone or stalled) ends it.
func (s streams) followEvents(w http.ResponseWriter, r *http.Request, id, after string, terminal bool) {
	dw := s.longResponse(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if dw.Flush() != nil {
		return
	}
	if after == "" {
		after = "0"
	}
	for r.Context().Err() == nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		evs, err := s.follow.WaitEvents(ctx, id, after, 2*time.Second, 500)
		cancel()
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			fmt.Fprintf(dw, "event: error\ndata: %q\n\n", err.Error())
			if dw.Flush() != nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
			continue
		}
		for _, e := range evs {
			b, _ := json.Marshal(e)
			fmt.Fprintf(dw, "id: %s\nevent: %s\ndata: %s\n\n", e.ID, e.Type, b)
			after = e.ID
			if e.Type == jobtype.EventState {
				var sc jobtype.StateChange
				if json.Unmarshal(e.Data, &sc) == nil && sc.To.Terminal() {
					terminal = true
				}
			}
		}
		if dw.Flush() != nil {
			return
		}
		if terminal && len(evs) == 0 {
			return // caught up with a finished job
		}
		if len(evs) == 0 {
			// Heartbeat comment keeps proxies from closing an idle stream,
			// and lets us notice a job that ended without us seeing it.
			fmt.Fprint(dw, ": keepalive\n\n")
			if dw.Flush() != nil {
				return
			}
			ctx, cancel := s.rctx(r)
			j, err := s.store.Get(ctx, id)
			cancel()
			if err == nil && j.State.Terminal() {
				terminal = true
			}
		}
	}
}

func (s streams) artifact(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !jobtype.ValidArtifactName(name) {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad artifact name", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "name", Value: name, Message: "must be a plain file name"}}})
		return
	}
	ctx, cancel := s.rctx(r)
	job, ok := s.readJob(ctx, w, r, r.PathValue("id"))
	cancel()
	if !ok {
		return
	}
	var art *jobtype.Artifact
	for i := range job.Artifacts {
		if job.Artifacts[i].Path == name {
			art = &job.Artifacts[i]
		}
	}
	if art == nil {
		writeJSON(w, http.StatusNotFound, wire.Error{Error: fmt.Sprintf("job %s has no artifact %q", job.ID, name), Code: "not_found"})
		return
	}
	dir, err := fileuri.Path(job.OutputURI)
	if err != nil {
		writeJSON(w, http.StatusNotFound, wire.Error{Error: err.Error(), Code: "not_found"})
		return
	}
	f, err := openPublished(dir, *art)
	if err != nil {
		msg := fmt.Sprintf("artifact %s of job %s: %v", name, job.ID, err)
		switch {
		case errors.Is(err, pathpolicy.ErrNotArtifact), errors.Is(err, pathpolicy.ErrSymlink), errors.Is(err, errArtifactChanged):
			// The request is fine; what lies on disk under the name is not
			// the file the job published (a link, a second name of another
			// file, other bytes). Retrying cannot help, so not a 5xx.
			s.log.Warn("artifact refused: not the file the job published", slog.String("job_id", job.ID), slog.String("artifact", name), slog.Any("err", err))
			writeJSON(w, http.StatusConflict, wire.Error{Error: msg, Code: "conflict"})
		case errors.Is(err, os.ErrNotExist):
			writeJSON(w, http.StatusNotFound, wire.Error{Error: msg + " (not readable here)", Code: "not_found"})
		default:
			s.log.Error("artifact", slog.String("job_id", job.ID), slog.String("artifact", name), slog.Any("err", err))
			writeJSON(w, http.StatusInternalServerError, wire.Error{Error: msg, Code: "internal"})
		}
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Lathe-SHA256", art.SHA256)
	w.Header().Set("Content-Length", strconv.FormatInt(art.Bytes, 10))
	// Never more than the recorded size, even if the file grows meanwhile.
	_, _ = io.CopyN(s.longResponse(w), f, art.Bytes) // an adapter may take longer than WriteTimeout
}

// errArtifactChanged: the file under a published artifact's name does not
// have the size the job recorded for it.
var errArtifactChanged = errors.New("the file is not the one the job published")

// openPublished opens the published artifact art in the job's output folder
// dir by descriptor: the folder with pathpolicy.OpenDir (its last component
// no link), the file through it with pathpolicy.OpenArtifact (a regular file
// with one link, no symbolic link), and its size must be the recorded one.
// Serving from the returned file never follows a link swapped in after
// publication, so a foreign file (/etc/shadow, ledger.key) is refused
// rather than streamed; the CLI's sha256 check is the second line.
func openPublished(dir string, art jobtype.Artifact) (*os.File, error) {
	d, err := pathpolicy.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	defer d.Close()
	f, size, err := pathpolicy.OpenArtifact(d, art.Path)
	if err != nil {
		return nil, err
	}
	if size != art.Bytes {
		f.Close()
		return nil, fmt.Errorf("%w (it has %d bytes, the job recorded %d)", errArtifactChanged, size, art.Bytes)
	}
	return f, nil
}
