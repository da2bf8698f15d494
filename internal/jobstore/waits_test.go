package jobstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestWaitPosition: the place in line read off a wait's JSON is the one
// the whole decode gives, for what SetWaits writes and for what it does
// not (another key first, spaces, a leading zero, a bad value).
func TestWaitPosition(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	var raws []string
	for _, w := range []jobtype.WaitInfo{{Position: 0, Code: "off", At: at}, {Position: 7, EstimatedStart: &at, Reason: "behind 6 jobs", At: at},
		{Position: 123456, Code: "no_fit", Reason: `needs "8" GPUs`}} {
		b, _ := json.Marshal(w)
		raws = append(raws, string(b))
	}
	raws = append(raws, `{"code":"x","position":4}`, `{ "position": 5 }`, `{"position":012}`, `{"position":3}`, `{"position":-1,"code":""}`,
		`{"position":1.5}`, `{"position":"2"}`, `not json`, ``, `{"position":2,"Position":3}`, `{"position":2,"po\u0073ition":3}`,
		`{"position":2,"reason":"\u00e9"}`, `{"position":2,"reason":"é"}`, `{"position":99999999999999999999}`)
	for _, raw := range raws {
		w, wantOK := jobstore.DecodeWait(raw)
		pos, ok := jobstore.WaitPosition(raw)
		if ok != wantOK || ok && pos != w.Position {
			t.Errorf("WaitPosition(%q) = %d, %v; the decode says %d, %v", raw, pos, ok, w.Position, wantOK)
		}
	}
}

// FuzzWaitPosition: WaitPosition agrees with decoding the whole wait
// wherever that decodes.
func FuzzWaitPosition(f *testing.F) {
	for _, s := range []string{`{"position":7,"code":"behind","reason":"r","at":"2026-12-04T10:00:00Z"}`, `{"position":0}`, `{"position":12}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		w, wantOK := jobstore.DecodeWait(raw)
		pos, ok := jobstore.WaitPosition(raw)
		if wantOK && (!ok || pos != w.Position) {
			t.Errorf("WaitPosition(%q) = %d, %v; the decode says %d", raw, pos, ok, w.Position)
		}
	})
}
