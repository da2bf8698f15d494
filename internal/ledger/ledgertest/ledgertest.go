// Package ledgertest makes a real ledger for tests: a fresh HMAC key in
// the test's temporary folder, on the test's Redis, under prefix "lathe:".
package ledgertest

import (
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/ledger"
)

// New is a ledger on rdb with a key of its own (ledger.GenerateKey).
func New(t testing.TB, rdb redis.UniversalClient) *ledger.Ledger {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "ledger.key")
	if err := ledger.GenerateKey(keyFile); err != nil {
		t.Fatal(err)
	}
	key, err := ledger.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.New(rdb, key, "lathe:")
}
