package redact

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/redact/redacttest"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":         "redis://127.0.0.1:6379/0",
		"redis://:s3cret@127.0.0.1:6379/0": "redis://:xxxxx@127.0.0.1:6379/0",
		"redis://redis:redis@host/0":       "redis://redis:xxxxx@host/0",
		"redis://u:p%40ss@host/0":          "redis://u:xxxxx@host/0",
		"http://ops:pw@127.0.0.1:8080":     "http://ops:xxxxx@127.0.0.1:8080",
		"redis://:pa ss@host:6379/x%zz":    "redis://xxxxx@host:6379/x%zz",
		"user:pw@host-without-scheme%zz":   "user:xxxxx@host-without-scheme%zz",
		"http://user@host/no-password":     "http://user@host/no-password",
		// Malformed: no "://", a bracket error, a password holding '/' or '#'.
		"redis:/:pw@host:6379/0":        "redis:xxxxx@host:6379/0",
		"redis//:pw@host:6379":          "xxxxx@host:6379",
		"http://u:pw@[::1:8080":         "http://xxxxx@[::1:8080",
		"http://u:pw@[::1]]:8080/x":     "http://xxxxx@[::1]]:8080/x",
		"http://u:p/w@host:8080":        "http://xxxxx@host:8080",
		"http://u:12#pw@host":           "http://xxxxx@host",
		"http://a:b@h/p@q":              "http://xxxxx@q",
		"redis://h:6379/0?password=pw":  "redis://h:6379/0?password=xxxxx",
		"https://h/x?a=1&Pass=pw&b=2":   "https://h/x?a=1&Pass=xxxxx&b=2",
		"https://h/x?X-Amz-Signature=s": "https://h/x?X-Amz-Signature=xxxxx",
		"s3://bucket/key":               "s3://bucket/key",
		"s3://AKIA:pw@bucket/key":       "s3://AKIA:xxxxx@bucket/key",
		"AWS":                           "AWS",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestText: a message that quotes a URL, or a piece of it, loses the
// secrets the URL held.
func TestText(t *testing.T) {
	u := "s3://AKIA:pw0rd@bucket/key"
	got := Text(`work_uri "`+u+`": bucket "AKIA:pw0rd@bucket" is not listed`, u)
	if strings.Contains(got, "pw0rd") || !strings.Contains(got, "s3://AKIA:xxxxx@bucket/key") {
		t.Fatalf("Text = %q", got)
	}
	if got := Text("plain s3://b/k", "s3://b/k"); got != "plain s3://b/k" {
		t.Fatalf("Text without a secret = %q", got)
	}
}

// TestParse: an error of a URL that holds a password never quotes it;
// that of a URL without one is the parser's cause.
func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:s3cretpw@[::1:8080":  "missing ']' in host",
		"http://u:s3cretpw/x@host":     "does not parse",
		"http://u:s3cretpw@host:x/":    `invalid port ":x" after host`,
		"http://[::1:8080":             "missing ']' in host",
		"http://u:s3cretpw%zz@h:8080/": "does not parse",
	} {
		_, err := Parse(in, url.Parse)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("Parse(%q): %v, want an error with %q and no password", in, err, want)
		}
	}
	if u, err := Parse("http://u:pw@h:8080", url.Parse); err != nil || u.Host != "h:8080" {
		t.Fatalf("a good URL: %v %v", u, err)
	}
}

// FuzzRedactURL: wherever a password is planted, in whatever malformed
// URL, URL and Text never print it, and Parse's errors (url.Parse) never
// quote it.
func FuzzRedactURL(f *testing.F) {
	redacttest.Fuzz(f, func(t *testing.T, u string) {
		redacttest.NoMarker(t, u, "URL", URL(u))
		redacttest.NoMarker(t, u, "Text", Text(fmt.Sprintf("error: %s, %q", u, u), u))
		if _, err := Parse(u, url.Parse); err != nil {
			redacttest.NoMarker(t, u, "Parse's error", err.Error())
		}
	})
}
