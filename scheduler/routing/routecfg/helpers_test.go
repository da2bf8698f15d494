package routecfg

import (
	"os"
	"testing"
)

// readTestdata returns a file of testdata, for configs shared with
// routing's tests.
func readTestdata(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func mustParse(t testing.TB, src string) Config {
	t.Helper()
	c, err := ParseConfig([]byte(src))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return c
}
