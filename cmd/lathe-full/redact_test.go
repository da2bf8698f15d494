package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/redact/redacttest"
)

// TestMalformedServerRedacted: a --server that does not parse, holding a
// password, is a usage error whose message names the URL without it.
func TestMalformedServerRedacted(t *testing.T) {
	for _, server := range []string{"http://u:SECRETPASS@[::1:8080", "http://u:SECRET/PASS@host:8080", "http://u:SECRETPASS@host:80x"} {
		r := lathe(t, server, "list")
		if r.code != exitUsage || strings.Contains(r.stderr, "SECRET") || !strings.Contains(r.stderr, "xxxxx@") {
			t.Errorf("LATHE_SERVER=%s: exit %d, stderr %q: want exit %d and the password redacted", server, r.code, r.stderr, exitUsage)
		}
	}
}

// FuzzServerURL: whatever --server (or LATHE_SERVER) holds a password in,
// the CLI's check of it, and what report prints for it (a usage error, or
// an unreachable scheduler), never show the password. No request is sent.
func FuzzServerURL(f *testing.F) {
	redacttest.Fuzz(f, func(t *testing.T, u string) {
		err := checkServer(u)
		if err == nil {
			err = fmt.Errorf("%w: connection refused", apiclient.ErrUnreachable)
		}
		var buf bytes.Buffer
		report(&buf, u, err)
		redacttest.NoMarker(t, u, "the CLI's error and report", err.Error()+buf.String())
	})
}
