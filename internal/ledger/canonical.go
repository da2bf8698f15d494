package ledger

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
)

// formatTag opens every record's canonical bytes; a new format gets a new tag.
const formatTag = "lathe-ledger/1"

// Canonical returns r's canonical bytes, the input to its MAC (doc.go):
// netstrings of the format tag, Seq, Time, Kind, JobID, Team, Token,
// ConfigHash, Body and Prev. MAC and StreamID are not part of them.
func Canonical(r Record) []byte {
	vals := [...]string{
		formatTag,
		strconv.FormatInt(r.Seq, 10),
		formatTime(r.Time),
		r.Kind, r.JobID, r.Team, r.Token, r.ConfigHash,
		string(r.Body),
		r.Prev,
	}
	n := 0
	for _, v := range vals {
		n += len(v) + 22
	}
	b := make([]byte, 0, n)
	for _, v := range vals {
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
		b = append(b, ',')
	}
	return b
}

// ComputeMAC returns the hex HMAC-SHA256 of r's canonical bytes under key:
// what r.MAC must be.
func ComputeMAC(key []byte, r Record) string {
	m := hmac.New(sha256.New, key)
	m.Write(Canonical(r))
	return hex.EncodeToString(m.Sum(nil))
}

// formatTime is how Time is written in the canonical bytes and the stream.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// normalizeBody returns body as encoding/json writes a json.RawMessage
// (compact, HTML characters escaped; nil becomes null), so that exporting and
// reading back with encoding/json keeps its bytes. It fails on invalid JSON.
func normalizeBody(body json.RawMessage) (json.RawMessage, error) {
	if len(body) == 0 {
		return json.RawMessage("null"), nil
	}
	return json.Marshal(body)
}
