package ledger

import (
	"bufio"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Report is what Verify, VerifyAgainst and VerifyExport found. A Report with
// no Problems means the ledger is intact: every record is as it was appended,
// none is missing, and (for Redis) the head names the last record.
type Report struct {
	// Records is how many records (stream entries, export lines) were read.
	Records int64
	// Head is the head MAC: the head key's for Verify, the last record's for
	// VerifyExport.
	Head string
	// Anchor is the anchor Verify held Redis to (WithAnchor), nil when the
	// ledger has none or its file was not written yet.
	Anchor *AnchorState `json:",omitempty"`
	// AnchorPath is the anchor's file, when the ledger has an anchor.
	AnchorPath string `json:",omitempty"`
	// Problems lists what is wrong, in the order found, so the first one
	// names the first record that is wrong. At most maxProblems are listed;
	// a last one then says how many more there were.
	Problems []Problem
}

// Problem is one thing Verify found wrong.
type Problem struct {
	// Seq is the record it concerns (the first missing one for a gap or a
	// truncation), 0 when unknown.
	Seq int64
	// StreamID is the Redis stream entry id, when there is one.
	StreamID string
	// What says what is wrong, naming the record, in full: "record 17
	// (stream id …): MAC mismatch: edited".
	What string
}

// Err returns nil for an intact ledger, else an error wrapping ErrTampered
// that quotes the first problem.
func (r Report) Err() error {
	switch len(r.Problems) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s", ErrTampered, r.Problems[0].What)
	}
	return fmt.Errorf("%w: %s (and %d more problems)", ErrTampered, r.Problems[0].What, len(r.Problems)-1)
}

// maxProblems bounds Report.Problems (a wrong key fails every record).
const maxProblems = 100

// Verify checks the ledger in Redis (doc.go, "Verifying"): each MAC under
// the key, Seq without gaps, each Prev linking to the record before, and the
// head naming the last record; with an anchor (WithAnchor), also that Redis
// holds the anchored record, with its MAC, so is not behind the anchor (doc.go,
// "The anchor"). It walks the records the head covered when it began, so
// concurrent appends are fine. The error is for failing to read Redis;
// what is wrong with the ledger is in the Report.
func (l *Ledger) Verify(ctx context.Context) (Report, error) { return l.VerifyAgainst(ctx, "") }

// VerifyAgainst is Verify that also requires a record with the MAC
// publishedHead (a head published earlier, from Head or Export) to be in the
// ledger, which catches a tail removed with the head rewritten to match, or
// the whole ledger deleted. "" skips that check.
func (l *Ledger) VerifyAgainst(ctx context.Context, publishedHead string) (Report, error) {
	return l.verify(ctx, publishedHead, l.anchor)
}

// verify is VerifyAgainst, held to anchor when it is not nil.
func (l *Ledger) verify(ctx context.Context, publishedHead string, anchor *Anchor) (Report, error) {
	// The anchor first: the keeper anchors only records Redis held, so an
	// anchor read before the snapshot is one the snapshot covers.
	var anc AnchorState
	var ancOK bool
	var ancErr error
	if anchor != nil {
		anc, ancOK, ancErr = anchor.Load()
	}
	h, headErr, lastID, err := l.snapshot(ctx)
	if err != nil {
		return Report{}, err
	}
	v := newVerifier(l.key, "stream", publishedHead)
	if ancOK && anc.Seq > 0 {
		v.anchor = &anc
	}
	if lastID != "" {
		err = l.scan(ctx, lastID, func(m redis.XMessage) error {
			r, err := decodeEntry(m)
			if err != nil {
				v.problem(0, m.ID, fmt.Sprintf("stream entry %s is unreadable: %v: edited", m.ID, err))
				v.rep.Records++
				return nil
			}
			v.add(r, "stream id "+r.StreamID)
			return nil
		})
		if err != nil {
			return Report{}, err
		}
	}
	v.rep.Head = h.mac
	switch {
	case headErr != nil:
		v.problem(0, "", strings.TrimPrefix(headErr.Error(), ErrTampered.Error()+": "))
	case !h.exists && v.rep.Records > 0:
		v.problem(0, "", fmt.Sprintf("the head key %s is missing but the stream holds %d records: head deleted", l.head, v.rep.Records))
	case h.exists:
		v.checkHead(h.seq, h.mac)
	}
	if anchor != nil {
		v.rep.AnchorPath = anchor.Path()
		if ancErr != nil {
			v.problem(0, "", strings.TrimPrefix(ancErr.Error(), "ledger: ")+": the anchor cannot be checked")
		} else if ancOK {
			v.rep.Anchor = &anc
		}
		if v.anchor != nil {
			v.checkAnchor(anchor.Path())
		}
	}
	return v.finish(), nil
}

// VerifyExport runs Verify's checks over an export (Export's JSON lines),
// with the key; a blank line is skipped. publishedHead, when not "", is a head
// published earlier that must be the MAC of one of the records: without it a
// removed tail cannot be told from an older export. The error is for failing
// to read r.
func VerifyExport(r io.Reader, key []byte, publishedHead string) (Report, error) {
	v := newVerifier(key, "export", publishedHead)
	br := bufio.NewReader(r)
	for line := int64(1); ; line++ {
		b, err := br.ReadBytes('\n')
		if len(strings.TrimSpace(string(b))) > 0 {
			var rec Record
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			if derr := dec.Decode(&rec); derr != nil {
				v.problem(0, "", fmt.Sprintf("line %d is unreadable: %v: edited", line, derr))
				v.rep.Records++
			} else {
				where := fmt.Sprintf("line %d", line)
				if rec.StreamID != "" {
					where += ", stream id " + rec.StreamID
				}
				v.add(rec, where)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Report{}, fmt.Errorf("ledger: read export: %w", err)
		}
	}
	v.rep.Head = v.lastMAC
	return v.finish(), nil
}

// verifier checks records fed to it in order.
type verifier struct {
	key       []byte
	noun      string // "stream" or "export", for messages
	published string
	found     bool // a record with the published MAC was seen
	lastSeq   int64
	lastMAC   string
	more      int64 // problems beyond maxProblems
	rep       Report

	anchor     *AnchorState // the record Redis must hold, nil: none
	anchorSeen bool         // a record numbered anchor.Seq was read
	anchorMAC  string       // its MAC
}

func newVerifier(key []byte, noun, published string) *verifier {
	return &verifier{key: key, noun: noun, published: strings.ToLower(strings.TrimSpace(published))}
}

func (v *verifier) problem(seq int64, streamID, what string) {
	if len(v.rep.Problems) >= maxProblems {
		v.more++
		return
	}
	v.rep.Problems = append(v.rep.Problems, Problem{Seq: seq, StreamID: streamID, What: what})
}

// add checks the next record; where locates it ("stream id …", "line 3").
func (v *verifier) add(r Record, where string) {
	v.rep.Records++
	name := fmt.Sprintf("record %d (%s)", r.Seq, where)
	want := v.lastSeq + 1
	switch {
	case r.Seq > want:
		// A gap: the Prev link cannot hold either, so say only the gap.
		missing := fmt.Sprintf("record %d missing", want)
		if r.Seq-want > 1 {
			missing = fmt.Sprintf("records %d–%d missing", want, r.Seq-1)
		}
		if v.lastSeq == 0 {
			v.problem(want, "", fmt.Sprintf("%s: deleted (the %s starts at %d)", missing, v.noun, r.Seq))
		} else {
			v.problem(want, "", fmt.Sprintf("%s: deleted (%d is followed by %d)", missing, v.lastSeq, r.Seq))
		}
	case r.Seq < want:
		v.problem(r.Seq, r.StreamID, fmt.Sprintf("%s comes after record %d: duplicated or reordered", name, v.lastSeq))
	case r.Prev != v.lastMAC:
		if v.lastSeq == 0 {
			v.problem(r.Seq, r.StreamID, fmt.Sprintf("%s: prev is %q, not empty as the first record's must be: edited", name, r.Prev))
		} else {
			v.problem(r.Seq, r.StreamID, fmt.Sprintf("%s: prev does not match record %d's MAC: chain broken (one of them rewritten)", name, v.lastSeq))
		}
	}
	if !hmac.Equal([]byte(ComputeMAC(v.key, r)), []byte(r.MAC)) {
		v.problem(r.Seq, r.StreamID, fmt.Sprintf("%s: MAC mismatch: edited", name))
	}
	if v.published != "" && r.MAC == v.published {
		v.found = true
	}
	if v.anchor != nil && r.Seq == v.anchor.Seq && !v.anchorSeen {
		v.anchorSeen, v.anchorMAC = true, r.MAC
	}
	if r.Seq >= want {
		v.lastSeq, v.lastMAC = r.Seq, r.MAC
	}
}

// checkHead compares the head key with the last record seen.
func (v *verifier) checkHead(seq int64, mac string) {
	switch {
	case seq > v.lastSeq && v.rep.Records == 0:
		v.problem(1, "", fmt.Sprintf("head says %d records, the stream is empty: truncated", seq))
	case seq > v.lastSeq:
		v.problem(v.lastSeq+1, "", fmt.Sprintf("head says %d records, the stream ends at %d: truncated", seq, v.lastSeq))
	case seq < v.lastSeq:
		v.problem(seq+1, "", fmt.Sprintf("head says %d records, the stream goes on to %d: head rewound or records added past it", seq, v.lastSeq))
	case mac != v.lastMAC:
		v.problem(seq, "", fmt.Sprintf("head MAC %s is not record %d's MAC %s: head or record rewritten", short(mac), seq, short(v.lastMAC)))
	}
}

// checkAnchor checks, after the walk, that the stream held the anchored
// record (path is the anchor's file, for messages).
func (v *verifier) checkAnchor(path string) {
	a := v.anchor
	switch {
	case v.lastSeq < a.Seq:
		v.problem(v.lastSeq+1, "", behindAnchor(v.lastSeq, path, *a))
	case !v.anchorSeen:
		v.problem(a.Seq, "", fmt.Sprintf("record %d, which the anchor in %s names (MAC %s), is not in Redis: deleted", a.Seq, path, short(a.MAC)))
	case v.anchorMAC != a.MAC:
		v.problem(a.Seq, "", fmt.Sprintf("record %d in Redis has MAC %s, but the anchor in %s says %s: Redis was wiped or rolled back and written again, or the record forged",
			a.Seq, short(v.anchorMAC), path, short(a.MAC)))
	}
}

func (v *verifier) finish() Report {
	if v.published != "" && !v.found {
		v.problem(0, "", fmt.Sprintf("published head %s is not in the %s, which ends at record %d: truncated or rewritten since it was published", short(v.published), v.noun, v.lastSeq))
	}
	if v.more > 0 {
		v.rep.Problems = append(v.rep.Problems, Problem{What: fmt.Sprintf("… and %d more problems", v.more)})
	}
	return v.rep
}

// short abbreviates a MAC for messages.
func short(mac string) string {
	if len(mac) > 16 {
		return mac[:16] + "…"
	}
	if mac == "" {
		return `""`
	}
	return mac
}
