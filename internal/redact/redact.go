// Package redact makes URLs fit to print: logs, errors and CLI messages
// never show a password a URL carries (a Redis URL, an endpoint, a
// --server with userinfo, an s3:// or file:// URI), nor a secret query
// value, whether the URL parses or not.
package redact

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Mask replaces what is hidden.
const Mask = "xxxxx"

// secretQuery matches a query parameter whose name says it holds a secret
// (password, pass, pwd, token, secret, key, signature, credential, auth,
// sig, in any case and inside longer names: access_token, X-Amz-Signature,
// api_key), up to the value's end (&, ; or #). Group 1 is the name and its
// '=', group 2 the value. Compiled on first use: the CLI's front links
// this package and would pay for it at every start.
var secretQuery = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)([?&;](?:sig|[^=&#;?]*(?:pass|pwd|token|secret|key|signature|credential|auth)[^=&#;?]*)=)([^&#;]*)`)
})

// URL is u fit to print:
//   - a URL that parses with one '@', its userinfo's: the password is
//     replaced by "xxxxx" (url.URL.Redacted), however it is encoded; a user
//     name alone is kept;
//   - any other text with an '@' (a URL that does not parse, a password
//     holding '/', '?' or '#', several '@'): everything between its scheme
//     ("redis://", "user:") or its start and its last '@' is replaced,
//     since where a password ends cannot be told;
//   - the value of a query parameter named like a secret (password=,
//     pass=, token=, …), wherever it is, is replaced.
//
// Text without an '@' or such a parameter is returned as it is.
func URL(u string) string {
	return secretQuery().ReplaceAllString(userinfo(u), "${1}"+Mask)
}

// userinfo is u with its userinfo's password, or all that precedes its
// last '@', replaced.
func userinfo(u string) string {
	at := strings.LastIndexByte(u, '@')
	if at < 0 {
		return u
	}
	if strings.IndexByte(u, '@') == at {
		if pu, err := url.Parse(u); err == nil && pu.User != nil {
			if _, has := pu.User.Password(); has {
				return pu.Redacted()
			}
			return u // "http://user@host": a user name, no password
		}
	}
	return scheme(u[:at]) + Mask + u[at:]
}

// scheme is the scheme that starts s with its separator ("redis://",
// "user:"), or "" when s starts with none.
func scheme(s string) string {
	i := strings.IndexByte(s, ':')
	if i <= 0 || !validScheme(s[:i]) {
		return ""
	}
	if strings.HasPrefix(s[i:], "://") {
		return s[:i+3]
	}
	return s[:i+1]
}

// validScheme reports whether s is a URL scheme: a letter, then letters,
// digits, '+', '-' or '.' (RFC 3986).
func validScheme(s string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// Text is text, a message about the URL u (an error that quotes it, as is
// or with %q, or quotes a piece of it that holds a whole secret, such as
// an s3:// URI's bucket), with u replaced by URL(u) and every secret
// URL(u) hides (the userinfo, or all before the last '@', the password,
// and secret query values) replaced by "xxxxx" wherever it appears. A
// message quoting part of a secret is not caught: build such a message
// from URL(u), or use Parse. Text about a u with no secret is returned as
// it is.
func Text(text, u string) string {
	if URL(u) == u {
		return text
	}
	text = strings.ReplaceAll(text, u, URL(u))
	text = strings.ReplaceAll(text, quoted(u), quoted(URL(u)))
	for _, s := range secrets(u) {
		text = strings.ReplaceAll(text, s, Mask)
		text = strings.ReplaceAll(text, quoted(s), Mask)
	}
	return text
}

// quoted is s as %q writes it, without the quotes.
func quoted(s string) string { q := strconv.Quote(s); return q[1 : len(q)-1] }

// secrets are the pieces of u that URL hides, longest first.
func secrets(u string) []string {
	var out []string
	if at := strings.LastIndexByte(u, '@'); at >= 0 {
		out = append(out, u[len(scheme(u[:at])):at])
		if pu, err := url.Parse(u); err == nil && pu.User != nil {
			if pw, has := pu.User.Password(); has {
				out = append(out, pw)
			}
		}
	}
	for _, m := range secretQuery().FindAllStringSubmatch(u, -1) {
		out = append(out, m[2])
	}
	out = slices.DeleteFunc(out, func(s string) bool { return s == "" })
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// Field is a config or spec field's value and the message about it, fit
// to print: a value that holds "://" (a URL or URI) becomes URL(value), and
// the message Text(msg, value); other values are returned as they are.
func Field(value, msg string) (string, string) {
	if !strings.Contains(value, "://") {
		return value, msg
	}
	return URL(value), Text(msg, value)
}

// Parse calls parse(u) (url.Parse, redis.ParseURL, …) and returns its
// result, or an error fit to print: parse's own error would quote u, or a
// piece of it (url.Parse quotes the whole input, "invalid port" the text
// after a colon), so the error is parse's error for URL(u) instead, which
// can quote only what URL(u) shows; when URL(u) parses, the error says
// only that u does not parse. A *url.Error is unwrapped to its
// cause: the caller names the URL (as URL(u)).
func Parse[T any](u string, parse func(string) (T, error)) (T, error) {
	v, err := parse(u)
	if err == nil {
		return v, nil
	}
	var zero T
	shown := URL(u)
	if shown != u {
		if _, err = parse(shown); err == nil {
			return zero, errors.New("does not parse (the error is not shown: it would quote the part hidden as " + Mask + ")")
		}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return zero, ue.Err
	}
	return zero, err
}
