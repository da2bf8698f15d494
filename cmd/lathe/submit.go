package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/specpath"
)

// submit is a `lathe submit FILE` the front can do itself.
type submit struct {
	file   string
	server string // --server, else LATHE_SERVER, else defaultServer
	json   bool   // -o json
	key    string // --idempotency-key; empty: a fresh one is made
	// sent is set once the job may have reached the scheduler: from then
	// on a hand-over carries key.
	sent bool
	// madeKey: key is the front's own, not the command line's.
	madeKey bool
	// answer is the scheduler's answer ("STATUS BODY") when the front got
	// one it does not print itself: lathe-full takes it as the answer to
	// its send (LATHE_FRONT_ANSWER), and sends nothing again.
	answer string
}

// parseSubmit reads args as `lathe submit FILE` with the flags the front
// knows, anywhere on the line as cobra allows them. ok is false for
// anything else: another command, another flag, no FILE or more than one,
// stdin ("-"), a flag without its value, "--".
func parseSubmit(args []string, envServer string) (s *submit, ok bool) {
	s = &submit{server: envServer}
	if s.server == "" {
		s.server = defaultServer
	}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		switch name {
		case "--server", "-o", "--output", "--idempotency-key":
		default:
			if strings.HasPrefix(a, "-o") && !strings.HasPrefix(a, "--") {
				name, val, hasVal = "-o", strings.TrimPrefix(a[2:], "="), true // -ojson, -o=json
				break
			}
			return nil, false
		}
		if !hasVal {
			if i+1 == len(args) {
				return nil, false
			}
			i++
			val = args[i]
		}
		if !s.set(name, val) {
			return nil, false
		}
	}
	if len(pos) != 2 || pos[0] != "submit" || pos[1] == "-" {
		return nil, false
	}
	s.file = pos[1]
	return s, true
}

// set takes flag name's value val; false for a value the front does not
// take (lathe-full says what is wrong with it).
func (s *submit) set(name, val string) bool {
	switch name {
	case "--server":
		s.server = val
	case "-o", "--output":
		if val != "table" && val != "json" {
			return false
		}
		s.json = val == "json"
	case "--idempotency-key":
		if val == "" {
			return false
		}
		s.key = val
	}
	return true
}

// run submits the spec and prints the job as lathe-full does. handled is
// false when lathe-full must take over; code is the exit code otherwise.
func (s *submit) run(token string, stdout io.Writer) (code int, handled bool) {
	u, ok := plainHTTP(s.server)
	if !ok || !headerSafe(token) || !headerSafe(s.key) {
		return 0, false
	}
	body, ok := readSpec(s.file)
	if !ok {
		return 0, false
	}
	if s.key == "" {
		if s.key, ok = newIdempotencyKey(); !ok {
			return 0, false
		}
		s.madeKey = true
	}
	hdr := []string{"Content-Type: application/json", "Accept: application/json", "Idempotency-Key: " + s.key}
	if token != "" {
		hdr = append(hdr, "Authorization: Bearer "+token)
	}
	s.sent = true
	status, answer, err := post(u, "/api/v1/jobs", hdr, body)
	if err != nil {
		return 0, false // no answer: lathe-full sends it again, with the key
	}
	if status != 200 && status != 201 {
		s.keep(status, answer)
		return 0, false
	}
	if err := printJob(stdout, answer, s.json); err != nil {
		if err == errAnswer {
			s.keep(status, answer)
			return 0, false
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1, true
	}
	return 0, true
}

// keep keeps the answer for lathe-full (submit.answer), when the
// environment can carry it: at most 64 KiB, no NUL. A longer one is not
// kept, and lathe-full sends the job again, with its key.
func (s *submit) keep(status int, body []byte) {
	if len(body) <= 64<<10 && !bytes.Contains(body, []byte{0}) {
		s.answer = strconv.Itoa(status) + " " + string(body)
	}
}

// printJob writes the submitted job (the API's answer) as lathe-full's
// submit does: a table of its id and state, or the whole Job as indented
// JSON, decoded and encoded as lathe-full does. An answer that is not a
// job is errAnswer, with nothing written.
func printJob(w io.Writer, answer []byte, asJSON bool) error {
	if asJSON {
		var job jobtype.Job
		if json.Unmarshal(answer, &job) != nil || job.ID == "" {
			return errAnswer
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(&job)
	}
	// Only the two fields the table shows: decoding the whole Job is a
	// tenth of the front's time.
	var job struct {
		ID    string        `json:"id"`
		State jobtype.State `json:"state"`
	}
	if json.Unmarshal(answer, &job) != nil || job.ID == "" {
		return errAnswer
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE")
	fmt.Fprintf(tw, "%s\t%s\n", job.ID, job.State)
	return tw.Flush()
}

// readSpec reads file, resolves its relative local paths against its
// folder and checks it, as lathe-full's parseSpec does, and returns the
// spec as the JSON to send. ok is false for any problem: lathe-full reads
// it again and names them.
func readSpec(file string) (body []byte, ok bool) {
	f, err := os.Open(file)
	if err != nil {
		return nil, false
	}
	data, err := io.ReadAll(io.LimitReader(f, jobspec.MaxSpecBytes+1))
	f.Close()
	if err != nil || len(data) > jobspec.MaxSpecBytes {
		return nil, false
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return nil, false
	}
	spec, err := jobspec.Parse(specpath.Resolve(data, dir))
	if err != nil {
		return nil, false
	}
	return spec.JSON(), true
}

// plainHTTP parses server as lathe-full's checkServer would accept it,
// limited to what the front sends itself: http://, a host, a path at most.
// Anything else (https://, a user or password, a query) goes to lathe-full.
func plainHTTP(server string) (*url.URL, bool) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil ||
		u.Opaque != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, false
	}
	return u, true
}

// headerSafe reports whether v can be sent as a header value as it is: no
// control characters (net/http refuses them; lathe-full then says so).
func headerSafe(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// newIdempotencyKey makes a key of apiclient.NewIdempotencyKey's form,
// "cli-" and 24 hex digits, from the kernel's random source (crypto/rand's
// start-up cost is a third of this program's).
func newIdempotencyKey() (string, bool) {
	f, err := os.Open("/dev/urandom")
	if err != nil {
		return "", false
	}
	defer f.Close()
	var b [12]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		return "", false
	}
	return "cli-" + hex.EncodeToString(b[:]), true
}
