package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// AnchorState is what an anchor file holds: a record of the ledger that
// Redis held when it was written. Seq 0 anchors nothing (an empty ledger).
type AnchorState struct {
	// Seq is the anchored record's number.
	Seq int64 `json:"seq"`
	// MAC is the anchored record's MAC.
	MAC string `json:"mac"`
	// StreamID is the anchored record's Redis stream id, where the keeper
	// looks for it before moving the anchor on.
	StreamID string `json:"stream_id,omitempty"`
	// Time is when the anchor was written (UTC).
	Time time.Time `json:"time"`
	// Reset says why the anchor was set by hand (Reanchor), "" when the
	// keeper moved it on.
	Reset string `json:"reset,omitempty"`
}

// anchorFormat names the anchor file's format, its first field.
const anchorFormat = "lathe-ledger-anchor/1"

// anchorFile is an AnchorState as stored.
type anchorFile struct {
	Format string `json:"format"`
	AnchorState
}

// Anchor is the ledger's head kept outside Redis: a small JSON file
// (anchorFormat, the seq, MAC and stream id of a record, the time it was
// written), replaced whole by writing a temporary file beside it, syncing
// it, renaming it into place and syncing the folder, so a reader sees the
// old anchor or the new one, never a part. Writers take an exclusive flock
// on path + ".lock" first, so several processes can keep one anchor: the
// keeper never writes a lower Seq over a higher one.
//
// The anchor is what Verify holds Redis to: someone who can write to Redis
// but not to the anchor's folder cannot wipe Redis, or put back an older
// copy of it, without Verify noticing (doc.go, "The anchor").
type Anchor struct {
	path string
}

// NewAnchor returns the anchor kept in the file at path (made on its first
// write).
func NewAnchor(path string) *Anchor { return &Anchor{path: path} }

// Path is the anchor file's path.
func (a *Anchor) Path() string { return a.path }

// Load reads the anchor. ok is false, with no error, when the file does not
// exist yet; an unreadable file is an error that names it.
func (a *Anchor) Load() (st AnchorState, ok bool, err error) {
	b, err := os.ReadFile(a.path)
	if errors.Is(err, fs.ErrNotExist) {
		return AnchorState{}, false, nil
	}
	if err != nil {
		return AnchorState{}, false, fmt.Errorf("ledger: anchor: %w", err)
	}
	var f anchorFile
	if err := json.Unmarshal(b, &f); err != nil {
		return AnchorState{}, false, fmt.Errorf("ledger: anchor %s is unreadable: %v", a.path, err)
	}
	if f.Format != anchorFormat || f.Seq < 0 || (f.Seq > 0 && f.MAC == "") {
		return AnchorState{}, false, fmt.Errorf("ledger: anchor %s is unreadable: format %q, seq %d, mac %q", a.path, f.Format, f.Seq, f.MAC)
	}
	return f.AnchorState, true, nil
}

// store writes st under the lock. Unless force, it writes only over a
// lower Seq (or no file) and returns wrote=false otherwise; prev is what
// the file held (zero when none).
func (a *Anchor) store(st AnchorState, force bool) (prev AnchorState, wrote bool, err error) {
	unlock, err := a.lock()
	if err != nil {
		return AnchorState{}, false, err
	}
	defer unlock()
	prev, _, err = a.Load()
	if err != nil && !force {
		return AnchorState{}, false, err
	}
	if !force && prev.Seq >= st.Seq {
		return prev, false, nil
	}
	if err := a.write(st); err != nil {
		return prev, false, err
	}
	return prev, true, nil
}

// lock takes the exclusive flock on path + ".lock", waiting for it.
func (a *Anchor) lock() (unlock func(), err error) {
	f, err := os.OpenFile(a.path+".lock", os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ledger: anchor lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ledger: anchor lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil // closing drops the flock
}

// write replaces the file with st: temporary file, fsync, rename, fsync of
// the folder. The file has mode 0600.
func (a *Anchor) write(st AnchorState) (err error) {
	b, err := json.Marshal(anchorFile{Format: anchorFormat, AnchorState: st})
	if err != nil {
		return fmt.Errorf("ledger: anchor: %w", err)
	}
	dir := filepath.Dir(a.path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(a.path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("ledger: anchor: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil { // CreateTemp makes 0600; an ACL might widen it
		return fmt.Errorf("ledger: anchor: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("ledger: anchor: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("ledger: anchor: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ledger: anchor: %w", err)
	}
	if err := os.Rename(f.Name(), a.path); err != nil {
		return fmt.Errorf("ledger: anchor: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("ledger: anchor: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("ledger: anchor: sync %s: %w", dir, err)
	}
	return nil
}

// KindAnchorReset is the kind of the record Reanchor appends.
const KindAnchorReset = "anchor_reset"

// Reanchor sets the anchor by hand, for when an operator knows why Redis
// differs from it: a restore from a backup older than the anchor, or a
// ledger lost and started again. It verifies the chain in Redis without
// the anchor and refuses (an error wrapping ErrTampered, with the report)
// unless it is intact; then appends a record of kind KindAnchorReset whose
// body says where the anchor was, where the ledger in Redis ended and why
// (reason), and anchors that record over whatever the anchor held. from is
// the anchor before (zero when there was none), to the anchor after.
func (l *Ledger) Reanchor(ctx context.Context, reason string) (from, to AnchorState, rep Report, err error) {
	if l.anchor == nil {
		return from, to, rep, errors.New("ledger: reanchor: the ledger has no anchor (WithAnchor)")
	}
	from, _, loadErr := l.anchor.Load() // an unreadable anchor is replaced
	rep, err = l.verify(ctx, "", nil)
	if err != nil {
		return from, to, rep, err
	}
	if err := rep.Err(); err != nil {
		return from, to, rep, fmt.Errorf("ledger: reanchor: the chain in Redis is not intact, so it cannot be anchored: %w", err)
	}
	type mark struct {
		Seq int64  `json:"seq"`
		MAC string `json:"mac"`
	}
	body := struct {
		Anchor      *mark  `json:"anchor"`
		AnchorError string `json:"anchor_error,omitempty"`
		Redis       mark   `json:"redis"`
		Reason      string `json:"reason"`
	}{Redis: mark{rep.Records, rep.Head}, Reason: reason}
	if loadErr != nil {
		body.AnchorError = loadErr.Error()
	} else if from.Seq > 0 {
		body.Anchor = &mark{from.Seq, from.MAC}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return from, to, rep, fmt.Errorf("ledger: reanchor: %w", err)
	}
	r, err := l.Append(ctx, Record{Kind: KindAnchorReset, Body: b})
	if err != nil {
		return from, to, rep, fmt.Errorf("ledger: reanchor: %w", err)
	}
	to = AnchorState{Seq: r.Seq, MAC: r.MAC, StreamID: r.StreamID, Time: r.Time, Reset: reason}
	if _, _, err := l.anchor.store(to, true); err != nil {
		return from, AnchorState{}, rep, fmt.Errorf("ledger: reanchor: %w", err)
	}
	return from, to, rep, nil
}
