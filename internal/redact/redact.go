// Package redact makes URLs fit to print: logs, errors and CLI messages
// never show a password a URL carries (a Redis URL, an endpoint, a
// --server with userinfo).
package redact

import (
	"net/url"
	"strings"
)

// URL is u fit to print: a password in its userinfo is replaced by
// "xxxxx" (url.URL.Redacted), wherever it appears in the text and however
// it is encoded. A URL that does not parse loses everything between its
// scheme and its last '@' instead, since where its password ends cannot be
// told.
func URL(u string) string {
	pu, err := url.Parse(u)
	if err == nil {
		if _, has := pu.User.Password(); has {
			return pu.Redacted()
		}
		// "user:pw@host" parses as scheme "user" with opaque "pw@host".
		if at := strings.LastIndex(pu.Opaque, "@"); at >= 0 {
			return pu.Scheme + ":xxxxx" + pu.Opaque[at:]
		}
		return u
	}
	if i := strings.Index(u, "://"); i >= 0 {
		if at := strings.LastIndex(u, "@"); at > i {
			return u[:i+3] + "xxxxx" + u[at:]
		}
	}
	if strings.Contains(u, "@") {
		return "xxxxx" + u[strings.LastIndex(u, "@"):]
	}
	return u
}
