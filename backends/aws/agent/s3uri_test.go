package agent

import (
	"strings"
	"testing"
)

// TestParseS3URIErrorRedacted: a job URI that is not s3://BUCKET/KEY and
// holds a password is named without it.
func TestParseS3URIErrorRedacted(t *testing.T) {
	for _, s := range []string{"https://AKIA:s3cretpw@host/job.json", "s3://AKIA:s3cretpw@bucket"} {
		_, err := ParseS3URI(s)
		if err == nil || strings.Contains(err.Error(), "s3cretpw") || !strings.Contains(err.Error(), "xxxxx@") {
			t.Errorf("ParseS3URI(%q): %v, want an error naming the URI redacted", s, err)
		}
	}
}
