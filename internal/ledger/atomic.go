package ledger

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// LuaAppend is a Lua fragment for a script that appends records in the
// same atomic call as another write, so that the records and what they
// are about are stored together or not at all (jobstore's create: a
// decision record and the job it admits). Prepend it to the script. It
// defines:
//
//	ledger_check(stream, head, seq, mac) -- nil while the head is still
//	    (seq, mac); else a reply to return as is: {'ledger_moved', seq, mac}
//	    (another appender won: Seal again on that head) or
//	    {'ledger_tampered', n} (the head is missing, the stream is not)
//	ledger_write(stream, head, argv, i, n) -- appends n entries whose
//	    field values are argv[i], argv[i+1], … (EntryArgs) and moves the
//	    head to the last one; pushes each entry with a team onto that
//	    team's index (stream..":team:"..team, the newest TeamIndexMax stream
//	    ids, newest first: Recent reads it); returns their stream ids
//
// Check first, before any write; write last. Append itself runs on them.
var LuaAppend = `
local LEDGER_TEAM_MAX = ` + strconv.Itoa(TeamIndexMax) + `
local ledger_fields = {'seq', 'time', 'kind', 'job_id', 'team', 'token', 'config_hash', 'body', 'prev', 'mac'}
local function ledger_check(stream, head, seq, mac)
  local h = redis.call('HMGET', head, 'seq', 'mac')
  local hseq = h[1] or '0'
  local hmac = h[2] or ''
  if hseq ~= seq or hmac ~= mac then return {'ledger_moved', hseq, hmac} end
  if hseq == '0' then
    local n = redis.call('XLEN', stream)
    if n > 0 then return {'ledger_tampered', n} end
  end
  return nil
end
local function ledger_write(stream, head, argv, i, n)
  local ids, seq, mac, teams = {}, nil, nil, {}
  for _ = 1, n do
    local e = {}
    for f = 1, #ledger_fields do
      e[#e + 1] = ledger_fields[f]; e[#e + 1] = argv[i + f - 1]
    end
    seq, mac = argv[i], argv[i + #ledger_fields - 1]
    local id = redis.call('XADD', stream, '*', unpack(e))
    ids[#ids + 1] = id
    local team = argv[i + 4]
    if team ~= '' then
      redis.call('LPUSH', stream .. ':team:' .. team, id)
      teams[team] = true
    end
    i = i + #ledger_fields
  end
  if n > 0 then redis.call('HSET', head, 'seq', seq, 'mac', mac) end
  for team in pairs(teams) do redis.call('LTRIM', stream .. ':team:' .. team, 0, LEDGER_TEAM_MAX - 1) end
  return ids
end
`

// EntryFields is how many values EntryArgs gives per record.
const EntryFields = len(fields)

// Keys are the ledger's Redis keys, for a script using LuaAppend: the
// stream, then the head.
func (l *Ledger) Keys() []string { return []string{l.stream, l.head} }

// Seal chains recs after the head (seq, mac), as Append would: it fills
// Seq, Prev, Time and MAC (Body compacted, StreamID cleared). It fails, on
// the first bad record, if a Body is not valid JSON or a string field is
// not valid UTF-8. Write the result with LuaAppend's ledger_write, in the
// same script as ledger_check(seq, mac), then call Appended.
func (l *Ledger) Seal(seq int64, mac string, recs []Record) ([]Record, error) {
	out := make([]Record, len(recs))
	for i, r := range recs {
		if err := prepare(&r); err != nil {
			return nil, err
		}
		seq++
		r.Seq, r.Prev, r.Time, r.StreamID = seq, mac, l.now().UTC().Round(0), ""
		r.MAC = ComputeMAC(l.key, r)
		mac = r.MAC
		out[i] = r
	}
	return out, nil
}

// prepare compacts r's Body and checks its strings, as Append does.
func prepare(r *Record) error {
	body, err := normalizeBody(r.Body)
	if err != nil {
		return fmt.Errorf("ledger: append: body: %w", err)
	}
	r.Body = body
	for name, s := range map[string]string{"kind": r.Kind, "job_id": r.JobID, "team": r.Team, "token": r.Token, "config_hash": r.ConfigHash} {
		if !utf8.ValidString(s) {
			return fmt.Errorf("ledger: append: %s is not valid UTF-8", name)
		}
	}
	return nil
}

// EntryArgs are sealed records' field values in the order ledger_write
// reads them (EntryFields per record).
func EntryArgs(recs []Record) []any {
	out := make([]any, 0, len(recs)*EntryFields)
	for _, r := range recs {
		for _, v := range entryValues(r) {
			out = append(out, v)
		}
	}
	return out
}

// CheckReply reads a reply of LuaAppend's ledger_check that a script
// returned: the head that moved (Seal again on it), or an error (ErrTampered).
func (l *Ledger) CheckReply(res []any) (seq int64, mac string, err error) {
	tag, _ := res[0].(string)
	switch {
	case tag == "ledger_tampered" && len(res) == 2:
		return 0, "", fmt.Errorf("%w: head %s is missing but stream %s holds %v entries (run lathe audit verify)", ErrTampered, l.head, l.stream, res[1])
	case tag == "ledger_moved" && len(res) == 3:
		s, _ := res[1].(string)
		if seq, err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, "", fmt.Errorf("%w: head %s: seq %q", ErrTampered, l.head, s)
		}
		mac, _ = res[2].(string)
		return seq, mac, nil
	}
	return 0, "", fmt.Errorf("ledger: unexpected reply %v", res)
}

// IsCheckReply reports whether a script's reply is one of ledger_check's.
func IsCheckReply(res []any) bool {
	if len(res) == 0 {
		return false
	}
	tag, _ := res[0].(string)
	return tag == "ledger_moved" || tag == "ledger_tampered"
}

// appendScript appends records on the head they were sealed on. KEYS:
// stream, head. ARGV: expected head seq ("0" when empty), expected head
// mac, number of records, their EntryArgs. Returns {'ok', {stream ids}} or
// a ledger_check reply. Made on first use (redis.NewScript hashes the
// source), not at init in every program that links the ledger.
var appendScript = sync.OnceValue(func() *redis.Script {
	return redis.NewScript(LuaAppend + `
local bad = ledger_check(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
if bad then return bad end
return {'ok', ledger_write(KEYS[1], KEYS[2], ARGV, 4, tonumber(ARGV[3]))}
`)
})

// AppendMany is Append for several records in a row, appended in one
// script call: all or none. Concurrent appenders never fork the chain: the
// loser of a race seals again on the new head until ctx ends.
func (l *Ledger) AppendMany(ctx context.Context, recs []Record) ([]Record, error) {
	seq, mac, err := l.Head(ctx)
	if err != nil {
		return nil, err
	}
	for {
		sealed, err := l.Seal(seq, mac, recs)
		if err != nil {
			return nil, err
		}
		argv := append([]any{strconv.FormatInt(seq, 10), mac, len(sealed)}, EntryArgs(sealed)...)
		res, err := appendScript().Run(ctx, l.rdb, l.Keys(), argv...).Slice()
		if err != nil {
			return nil, fmt.Errorf("ledger: append: %w", err)
		}
		if tag, _ := res[0].(string); tag == "ok" {
			ids, _ := res[1].([]any)
			for i := range sealed {
				if i < len(ids) {
					sealed[i].StreamID, _ = ids[i].(string)
				}
			}
			l.Appended()
			return sealed, nil
		}
		if seq, mac, err = l.CheckReply(res); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("ledger: append: %w", err)
		}
	}
}
