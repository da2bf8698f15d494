package scheduler_test

import (
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/scheduler"
)

// TestSubmitRefusesJSONThatIsNotUTF8: a JSON body with a byte that is not
// UTF-8 is a 400 that says where, not a job whose name holds U+FFFD; a
// number too large for a float64 is out of range. Nothing is stored.
func TestSubmitRefusesJSONThatIsNotUTF8(t *testing.T) {
	b := setup(t, scheduler.Config{})
	for _, tc := range []struct{ body, want string }{
		{strings.Replace(goodSpec, `"name":"ok"`, "\"name\":\"o\xffk\"", 1), `"message":"invalid JSON: not UTF-8 at line 1, column 11 (byte 10): a job spec must be UTF-8 text"`},
		{strings.Replace(goodSpec, `"name":"ok"`, `"name":"ok\ud800"`, 1), `is half a UTF-16 surrogate pair`},
		{strings.Replace(goodSpec, `}`, `,"training":{"learning_rate":1e400}}`, 1), `"field":"training.learning_rate","value":"1e400","message":"is out of range for a number (a 64-bit float holds at most about ±1.8e308)"`},
	} {
		code, body := do(t, "POST", b.url+"/api/v1/jobs", tc.body, nil)
		if code != 400 || !strings.Contains(string(body), tc.want) {
			t.Errorf("submit %q: %d %s; want 400 with %s", tc.body, code, body, tc.want)
		}
	}
	if n, _ := b.rdb.ZCard(b.ctx, "lathe:jobs").Result(); n != 0 {
		t.Fatalf("%d jobs stored", n)
	}
}
