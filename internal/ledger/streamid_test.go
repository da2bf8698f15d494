package ledger

import (
	"regexp"
	"testing"
)

// TestIsStreamIDMatchesTheRegexp checks isStreamID against the regexp it
// replaced.
func TestIsStreamIDMatchesTheRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[0-9]+-[0-9]+$`)
	for _, id := range []string{"", "-", "1-", "-1", "1-2", "1700000000000-0", "12-34-5", "a-1", "1-a", "1 -2", "1-2\n", "０-1", "1-2-"} {
		if got, want := isStreamID(id), re.MatchString(id); got != want {
			t.Errorf("isStreamID(%q) = %v, the regexp says %v", id, got, want)
		}
	}
}
