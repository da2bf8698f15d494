package main

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/lathe-ml/lathe/internal/apiclient"
)

// frontAnswerEnv carries, from the CLI's front (cmd/lathe) to lathe-full,
// the scheduler's answer to the submit the front sent and could not print
// itself (a refusal, a spec the scheduler found invalid, a 503): "STATUS
// BODY". lathe-full takes it as the answer to its own first
// POST /api/v1/jobs instead of sending the job again, so that one
// `lathe submit` is one request, whatever it is answered: a refusal sent
// twice would be recorded twice in the routing ledger, and a submit
// answered 503 is resent with its key as lathe-full resends its own.
const frontAnswerEnv = "LATHE_FRONT_ANSWER"

// frontAnswered is the HTTP client that answers the first
// POST /api/v1/jobs with the front's answer (env, frontAnswerEnv's value)
// and sends everything else; nil when env holds no answer (empty, or not
// "STATUS BODY" with a status of 100 to 999).
func frontAnswered(env string) *http.Client {
	code, body, ok := strings.Cut(env, " ")
	status, err := strconv.Atoi(code)
	if !ok || err != nil || status < 100 || status > 999 {
		return nil
	}
	return &http.Client{Transport: &answered{status: status, body: []byte(body), next: apiclient.DefaultTransport()}}
}

// answered is a transport that gives its answer to the first job submit
// it sees and sends the rest with next.
type answered struct {
	status int
	body   []byte
	once   sync.Once
	next   http.RoundTripper
}

func (t *answered) RoundTrip(r *http.Request) (*http.Response, error) {
	mine := false
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/api/v1/jobs") {
		t.once.Do(func() { mine = true })
	}
	if !mine {
		return t.next.RoundTrip(r)
	}
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: t.status, Status: strconv.Itoa(t.status) + " " + http.StatusText(t.status),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, ContentLength: int64(len(t.body)),
		Body: io.NopCloser(bytes.NewReader(t.body)), Request: r}, nil
}
