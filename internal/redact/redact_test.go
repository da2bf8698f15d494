package redact

import "testing"

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
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}
