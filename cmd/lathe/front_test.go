package main

import (
	"bufio"
	"strings"
	"testing"
)

// TestParseSubmit: the command lines the front takes itself, with their
// flags anywhere as cobra allows, and those it hands over.
func TestParseSubmit(t *testing.T) {
	for _, c := range []struct {
		args         []string
		ok           bool
		file, server string
		json         bool
		key          string
	}{
		{args: []string{"submit", "a.yaml"}, ok: true, file: "a.yaml", server: "http://env:1"},
		{args: []string{"--server", "http://s:2", "submit", "a.yaml"}, ok: true, file: "a.yaml", server: "http://s:2"},
		{args: []string{"submit", "a.yaml", "--server=http://s:2", "-o", "json"}, ok: true, file: "a.yaml", server: "http://s:2", json: true},
		{args: []string{"-ojson", "submit", "a.yaml"}, ok: true, file: "a.yaml", server: "http://env:1", json: true},
		{args: []string{"-o=table", "submit", "a.yaml", "--output", "json", "--output=table"}, ok: true, file: "a.yaml", server: "http://env:1"},
		{args: []string{"submit", "--idempotency-key", "K1", "a.yaml"}, ok: true, file: "a.yaml", server: "http://env:1", key: "K1"},
		{args: []string{"submit", "a.yaml", "--idempotency-key=K2"}, ok: true, file: "a.yaml", server: "http://env:1", key: "K2"},
		// Handed over: other commands, flags, forms.
		{args: []string{"status", "j-1"}},
		{args: []string{"submit"}},
		{args: []string{"submit", "a.yaml", "b.yaml"}},
		{args: []string{"submit", "-"}},
		{args: []string{"submit", "a.yaml", "--wait"}},
		{args: []string{"submit", "a.yaml", "--dry-run"}},
		{args: []string{"submit", "a.yaml", "-h"}},
		{args: []string{"submit", "a.yaml", "-o", "yaml"}},
		{args: []string{"submit", "a.yaml", "-o"}},
		{args: []string{"submit", "a.yaml", "--server"}},
		{args: []string{"submit", "a.yaml", "--idempotency-key="}},
		{args: []string{"submit", "--", "a.yaml"}},
		{args: []string{"a.yaml", "submit"}},
		{args: []string{"submit", "a.yaml", "--servers=x"}},
	} {
		s, ok := parseSubmit(c.args, "http://env:1")
		if ok != c.ok {
			t.Errorf("%q: ok = %v, want %v", c.args, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if s.file != c.file || s.server != c.server || s.json != c.json || s.key != c.key {
			t.Errorf("%q = file %q server %q json %v key %q, want %q %q %v %q",
				c.args, s.file, s.server, s.json, s.key, c.file, c.server, c.json, c.key)
		}
	}
	if s, ok := parseSubmit([]string{"submit", "a.yaml"}, ""); !ok || s.server != defaultServer {
		t.Errorf("with LATHE_SERVER unset the server is %q, want %q", s.server, defaultServer)
	}
}

// TestIsRootHelp: the four ways to ask for the root help, and no others.
func TestIsRootHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"--help"}, {"-h"}, {"help"}} {
		if !isRootHelp(args) {
			t.Errorf("%q is the root help", args)
		}
	}
	for _, args := range [][]string{{"help", "submit"}, {"submit", "--help"}, {"--help", "-o", "json"}, {"version"}} {
		if isRootHelp(args) {
			t.Errorf("%q is not the root help", args)
		}
	}
}

// TestHelpTextServer: LATHE_SERVER shows as --server's default, quoted as
// cobra quotes it; unset, the help is the embedded text as it is.
func TestHelpTextServer(t *testing.T) {
	if helpText("") != rootHelp {
		t.Error("with LATHE_SERVER unset the help is not rootHelp")
	}
	if !strings.Contains(rootHelp, `(default "http://127.0.0.1:8080")`) {
		t.Fatal(`help.txt has no (default "http://127.0.0.1:8080"): regenerate it (go test ./cmd/lathe-full -run TestFrontHelp -update)`)
	}
	got := helpText(`http://h:1/"x"`)
	if !strings.Contains(got, `(default "http://h:1/\"x\"")`) || strings.Contains(got, "127.0.0.1:8080") {
		t.Errorf("LATHE_SERVER not shown as the default:\n%s", got)
	}
}

// TestPlainHTTP: what the front posts to itself; the rest goes to lathe-full.
func TestPlainHTTP(t *testing.T) {
	for _, s := range []string{"http://127.0.0.1:8080", "http://h", "http://[::1]:9/", "http://h:1/base/"} {
		if _, ok := plainHTTP(s); !ok {
			t.Errorf("%q: handed over, want posted", s)
		}
	}
	for _, s := range []string{"https://h", "http://u:p@h", "http://h/?q=1", "http://h/#f", "h:80", "http://", "ftp://h", "http://h:1\n"} {
		if _, ok := plainHTTP(s); ok {
			t.Errorf("%q: posted, want handed over", s)
		}
	}
}

// TestReadAnswer: the answers the front reads (a length, chunks, up to the
// close) and the ones it refuses as malformed.
func TestReadAnswer(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		status    int
		body      string
		bad       bool
	}{
		{name: "length", raw: "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello", status: 201, body: "hello"},
		{name: "chunked", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nX-T: 1\r\n\r\n", status: 200, body: "hello"},
		{name: "to the close", raw: "HTTP/1.0 200 OK\r\n\r\nhello", status: 200, body: "hello"},
		{name: "bare LF", raw: "HTTP/1.1 400 Bad Request\nContent-Length: 2\n\nno", status: 400, body: "no"},
		{name: "short body", raw: "HTTP/1.1 201 Created\r\nContent-Length: 9\r\n\r\nhello", bad: true},
		{name: "no status", raw: "HTTP/1.1 abc\r\n\r\n", bad: true},
		{name: "not HTTP", raw: "SSH-2.0-OpenSSH\r\n\r\n", bad: true},
		{name: "1xx", raw: "HTTP/1.1 100 Continue\r\n\r\n", bad: true},
		{name: "negative length", raw: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", bad: true},
		{name: "huge length", raw: "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", bad: true},
		{name: "bad chunk size", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", bad: true},
		{name: "chunk without its end", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhelXX\r\n", bad: true},
		{name: "other encoding", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", bad: true},
		{name: "header without colon", raw: "HTTP/1.1 200 OK\r\nnonsense\r\n\r\n", bad: true},
		{name: "cut in the headers", raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", bad: true},
		{name: "empty", raw: "", bad: true},
	} {
		status, body, err := readAnswer(bufio.NewReader(strings.NewReader(c.raw)))
		if c.bad {
			if err == nil {
				t.Errorf("%s: read as %d %q, want an error", c.name, status, body)
			}
			continue
		}
		if err != nil || status != c.status || string(body) != c.body {
			t.Errorf("%s: %d %q %v, want %d %q", c.name, status, body, err, c.status, c.body)
		}
	}
}

// TestHeaderSafe: a token or key with a control character is not sent as
// a header by the front (lathe-full refuses it with its own error).
func TestHeaderSafe(t *testing.T) {
	if !headerSafe("tok-en_1.~") || !headerSafe("") {
		t.Error("plain values refused")
	}
	for _, v := range []string{"a\r\nX-Evil: 1", "a\nb", "a\x00", "a\x7f"} {
		if headerSafe(v) {
			t.Errorf("%q passed", v)
		}
	}
}

// TestWithoutAnswer: an answer in the front's own environment never
// reaches lathe-full; only one the front got does.
func TestWithoutAnswer(t *testing.T) {
	env := []string{"A=1", answerEnv + "=422 {}", "B=" + answerEnv + "=x"}
	got := withoutAnswer(env)
	if strings.Join(got, " ") != "A=1 B="+answerEnv+"=x" || len(env) != 3 {
		t.Errorf("withoutAnswer = %q (input %q)", got, env)
	}
}
