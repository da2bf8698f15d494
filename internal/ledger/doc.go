// Package ledger is Lathe's tamper-evident, append-only record of routing
// decisions (docs/design.md, "Routing"): every decision and every staging, with who
// submitted it, its inputs, each candidate accepted or rejected and why, the
// estimates, the choice and a hash of the config, appended to one Redis stream
// that is never capped. Each record is chained to the one before by an
// HMAC-SHA256 whose key lives outside Redis, in a file named in the config
// (LoadKey, GenerateKey), so someone who can write to Redis but does not hold
// the key cannot edit, delete or truncate records without Verify noticing.
//
// # Keys (prefix "lathe:" by default)
//
//	ledger        stream  one entry per record, never trimmed (XADD without MAXLEN)
//	ledger:head   hash    seq and mac of the last record
//	ledger:team:T list    the stream ids of team T's newest records (TeamIndexMax),
//	                      newest first: an index for Recent, not covered by any MAC
//
// Each stream entry has exactly the fields seq, time, kind, job_id, team,
// token, config_hash, body, prev and mac, in that order, holding the Record's
// values as text (seq in decimal, time as below, body as JSON). An entry with
// a field missing or an unknown one is unreadable, and Verify reports it.
//
// # Appending
//
// Append reads the head, fills in Seq (head + 1), Time, Prev (the head's MAC)
// and MAC in Go, where the key is, and runs one Lua script that appends the
// entry and moves the head only if the head is still what was read. If another
// appender (a second scheduler) got there first, Append computes the record
// again on top of the new head, so records are numbered 1, 2, 3, … with no gaps
// however many appenders there are.
//
// # Canonical bytes and the MAC
//
// A record's MAC is the lower-case hex HMAC-SHA256, under the key, of its
// canonical bytes: the netstrings (length in decimal ASCII, ":", the bytes,
// ",") of these ten values, concatenated in this order:
//
//	"lathe-ledger/1"   a fixed tag naming this format
//	seq                decimal, no sign or leading zeros ("17")
//	time               Time in UTC as RFC 3339 with nanoseconds, trailing zeros dropped
//	                   (Go's time.RFC3339Nano: "2025-03-01T12:00:00.5Z")
//	kind, job_id, team, token, config_hash
//	                   the strings' UTF-8 bytes ("" is "0:,")
//	body               the Body bytes exactly as stored
//	prev               the previous record's MAC in hex ("" for record 1)
//
// For example record 1 of kind "decision" with body {"a":1} at
// 2025-03-01T12:00:00Z and every other field empty is
//
//	14:lathe-ledger/1,1:1,20:2025-03-01T12:00:00Z,8:decision,0:,0:,0:,0:,7:{"a":1},0:,
//
// Seq, Time and Prev are covered, so a record cannot be moved, re-dated or
// spliced into another chain; MAC and StreamID are not (the stream id is
// Redis's, and an honest restore may change it). Append stores Body as Go's
// encoding/json writes a json.RawMessage (compact, with <, > and & escaped),
// so the bytes that are MACed are the bytes an export carries, and reading an
// export back with encoding/json gives them again. An export reformatted by
// another tool (jq, a pretty-printer) no longer verifies.
//
// # Verifying
//
// Verify walks the stream in order and checks that every MAC is right under
// the key, that Seq runs 1, 2, 3, … with no gap, that each Prev is the MAC of
// the record before, and that the head names the last record. It reports every
// problem it finds (up to 100), the first one naming the first record that is
// wrong: "record 17 (stream id …): MAC mismatch: edited", "record 18 missing:
// deleted (17 is followed by 19)", "head says 42 records, the stream ends at
// 40: truncated". Recomputing the later MACs with another key does not help an
// attacker: every recomputed record fails under the real key.
//
// What the chain alone cannot show is a tail removed together with a head
// rewritten to match (the head is readable, so anyone can point it at the new
// last record), or the stream and head both deleted. Publishing the head now
// and then (Head, Export) closes that: VerifyAgainst and VerifyExport with a
// head published earlier fail when no record with that MAC remains.
//
// Export writes the records as JSON lines, one Record per line in order, and
// returns the head MAC; VerifyExport runs the same checks over such a file,
// elsewhere, with the key.
//
// # The anchor
//
// The chain cannot show that Redis was wiped (FLUSHALL leaves an empty,
// intact ledger) or put back to an older copy (an RDB or AOF from before
// some appends is an intact, shorter ledger). WithAnchor keeps the head
// outside Redis as well, in a file (Anchor: the seq, MAC and stream id of a
// record, replaced atomically, mode 0600, by default ledger.anchor beside
// the key), and Verify then also requires Redis to hold the anchored record
// with the anchored MAC: "the ledger in Redis ends at record 40, but the
// anchor in /var/lib/lathe/ledger.anchor says record 57 with MAC …: Redis
// was wiped or rolled back". Redis ahead of the anchor is fine.
//
// The anchor is written by an AnchorKeeper, not by the appends: appends run
// in Lua scripts in several places and processes (the scheduler's decisions,
// the API's admissions, a sweep's chunks, an AWS worker's staging records,
// on other hosts perhaps), and a file write per record would slow a
// 10,000-trial sweep. Settle after an append of its own process (Appended;
// the appends meanwhile share one write), and every Poll for other
// processes' appends, the keeper reads the ledger in Redis: its last record
// that Redis has held for Settle (by the stream id against Redis's TIME:
// Redis answers a write before its AOF reaches the disk, so a crash of
// Redis loses about the last second, which must not look like a
// rollback). When that record is made with the key, is past the anchor,
// and Redis still holds the anchored record at its stream id, the keeper
// writes it to the file, never a lower record over a higher one. Once
// Redis is behind the anchor or has lost the anchored record, the keeper
// leaves the anchor where it is and logs an error; Verify fails until an
// operator runs Reanchor, which verifies the chain, appends a record
// saying where the anchor was and why it moves (KindAnchorReset), and
// anchors that record.
//
// The window: the anchor lags Redis by about Settle (this process's
// appends; 3s by default) or Settle + Poll (other processes'; 4s), plus a
// file write. Records appended in that window and lost in a wipe or a
// rollback are not noticed, nor is a rollback to a copy that still holds
// the anchored record. Each keeper's anchor is its own: two schedulers on
// two hosts keep two files, each checked by the Verify of its own process.
// The anchor guards against someone who can write to Redis but not to the
// anchor's folder.
package ledger
