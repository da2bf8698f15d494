// Package redacttest plants a password in URLs of every shape, well
// formed or not, for the fuzz tests of redaction (internal/redact, the
// Redis URL of lathed, the CLI's --server): whatever a message prints, it
// must never hold Marker.
package redacttest

import (
	"strings"
	"testing"
)

// Marker is the password planted; no printed text may hold it.
const Marker = "SECRETPASS"

// Plant builds a URL holding Marker in a password position from a fuzzer's
// pieces: mode%4 == 0 in the userinfo (prefix + "u:" + Marker + pw + "@" +
// suffix), else as the value of a password=, pass= or token= query
// parameter (prefix + "?" + key + "=" + Marker + pw + suffix). ok is false
// when the pieces hold Marker themselves (it would not be in a password
// position).
func Plant(mode uint8, prefix, pw, suffix string) (u string, ok bool) {
	if mode%4 == 0 {
		u = prefix + "u:" + Marker + pw + "@" + suffix
	} else {
		key := []string{"password", "pass", "token"}[mode%4-1]
		u = prefix + "?" + key + "=" + Marker + pw + suffix
	}
	return u, strings.Count(u, Marker) == 1
}

// Seed is one seed of the corpus: Plant's arguments.
type Seed struct {
	Mode               uint8
	Prefix, PW, Suffix string
}

// Seeds are the malformed (and some well-formed) shapes that printed
// passwords before: no "://", a bracket error in the host, a password
// holding '/', '#' or '?', a bad escape, several '@', a control character,
// secret query values.
var Seeds = []Seed{
	{0, "redis://", "", "127.0.0.1:6379/0"},
	{0, "redis://", "", "[::1:6379/0"},                   // a bracket error
	{0, "redis://", "", "[::1]]:6379/0"},                 // another
	{0, "redis:/", "", "host:6379/0"},                    // no "://": go-redis quotes the path
	{0, "redis:", "", "host:6379/0"},                     // opaque
	{0, "", "", "host:6379"},                             // no scheme
	{0, "http://", "", "[::1:8080"},                      // lathe --server
	{0, "http://", "/x", "host"},                         // '/' in the password: "invalid port"
	{0, "http://", "#x", "host"},                         // '#' in the password
	{0, "http://", "?x", "host"},                         // '?' in the password
	{0, "http://", "%zz", "host"},                        // a bad escape
	{0, "http://a:b@h/#", "", "host"},                    // two '@'
	{0, "http://", "", "h/p@q"},                          // an '@' after the host
	{0, "s3://", "", "bucket/key"},                       // an s3 URI
	{0, "rediss://", "\x7f", "h:6380/1"},                 // a control character
	{0, "redis://", "", "h:6379/notadb"},                 // a bad db number
	{0, "unix://", "", "/run/redis.sock"},                // a unix socket
	{0, "http://x:y", ":", "[fe80::1%25en"},              // a zone
	{1, "redis://h:6379/0", "", "&db=1"},                 // password=
	{2, "https://h/x", "", "#frag"},                      // pass=
	{3, "http://[::1", "&x=1", ""},                       // token=, malformed
	{1, "redis://u:p@h", "@", "x"},                       // both
	{1, "redis://h:6379/0", "", "&db=x"},                 // password= and a bad db
	{0, "redis+sentinel://", "", "h:1,h2:2/m/x"},         // Sentinel, a bad db
	{0, "redis+sentinel://", "/x", "h:1,:2/m"},           // Sentinel, '/' in the password, a bad host
	{0, "redis+sentinel://u:", "%zz", "h:1/m?x=1"},       // Sentinel, a bad escape, a bad parameter
	{1, "redis+sentinel://h:1/m?min_replicas=x", "", ""}, // Sentinel, password= and a bad min_replicas
}

// Fuzz fuzzes check with URLs holding a planted password: Seeds first,
// then what the fuzzer makes of their pieces (mode, prefix, pw, suffix:
// Plant's arguments). check fails the test, with NoMarker, where what it
// would print holds Marker.
func Fuzz(f *testing.F, check func(t *testing.T, u string)) {
	for _, s := range Seeds {
		f.Add(s.Mode, s.Prefix, s.PW, s.Suffix)
	}
	f.Fuzz(func(t *testing.T, mode uint8, prefix, pw, suffix string) {
		u, ok := Plant(mode, prefix, pw, suffix)
		if !ok {
			t.Skip()
		}
		check(t, u)
	})
}

// NoMarker fails t when printed, what the code under test would print for
// the URL u (what says what it is), holds Marker.
func NoMarker(t *testing.T, u, what, printed string) {
	t.Helper()
	if strings.Contains(printed, Marker) {
		t.Fatalf("%s for %q holds the password: %q", what, u, printed)
	}
}
