package specpath

import (
	"regexp"
	"testing"
)

// TestHasURISchemeMatchesTheRegexp checks hasURIScheme against the regexp
// it replaced.
func TestHasURISchemeMatchesTheRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	for _, v := range []string{"", ":", "s3://b/k", "file:x", "https://h", "a:", "A+b.c-d:rest", "1a:", "+a:", "data/train.jsonl",
		"C:\\x", "ab", "a b:", "é:", "a/b:c", "git+ssh://h", "./a:b"} {
		if got, want := hasURIScheme(v), re.MatchString(v); got != want {
			t.Errorf("hasURIScheme(%q) = %v, the regexp says %v", v, got, want)
		}
	}
}
