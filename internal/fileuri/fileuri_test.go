package fileuri

import (
	"strings"
	"testing"
)

// TestPathErrorRedacted: a URI that does not parse, or is not a local
// file, and holds a password is named without it.
func TestPathErrorRedacted(t *testing.T) {
	for _, uri := range []string{"file://u:s3cretpw@[::1/data", "file://u:s3cretpw@host/data", "s3://AKIA:s3cretpw@b/k"} {
		_, err := Path(uri)
		if err == nil || strings.Contains(err.Error(), "s3cretpw") || !strings.Contains(err.Error(), "xxxxx@") {
			t.Errorf("Path(%q): %v, want an error naming the URI redacted", uri, err)
		}
	}
	if p, err := Path("file:///data/x.jsonl"); err != nil || p != "/data/x.jsonl" {
		t.Fatalf("Path of a good URI: %q %v", p, err)
	}
}
