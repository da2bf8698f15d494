package routing

import (
	"testing"
	"time"
)

// TestParseWhatIf: the what-if rules the API and the CLI share; a bad
// value is named with its field and as given.
func TestParseWhatIf(t *testing.T) {
	for _, v := range []string{"local=3h", "local=1d12h", "local=0s", "local=0"} {
		if _, fe := ParseWhatIf([]string{v}, nil); len(fe) != 0 {
			t.Errorf("wait %q refused: %v", v, fe)
		}
	}
	for _, v := range []string{"aws-eu=5000", "aws-eu=0", "aws-eu=12.5", "aws-eu=1e3"} {
		if _, fe := ParseWhatIf(nil, []string{v}); len(fe) != 0 {
			t.Errorf("spend %q refused: %v", v, fe)
		}
	}
	for _, v := range []string{"local", "=3h", "local=", "local=soon", "local=-1h", "local=Inf", "local=NaN", "local=1e400h", "local=999999999999d"} {
		if _, fe := ParseWhatIf([]string{v}, nil); len(fe) != 1 || fe[0].Field != "assume_wait" || fe[0].Value != v {
			t.Errorf("wait %q: %v, want one assume_wait error with the value", v, fe)
		}
	}
	for _, v := range []string{"aws-eu", "=5", "aws-eu=", "aws-eu=lots", "aws-eu=-5", "aws-eu=Inf", "aws-eu=+Inf", "aws-eu=-Inf", "aws-eu=NaN", "aws-eu=1e400"} {
		if _, fe := ParseWhatIf(nil, []string{v}); len(fe) != 1 || fe[0].Field != "assume_spent" || fe[0].Value != v {
			t.Errorf("spend %q: %v, want one assume_spent error with the value", v, fe)
		}
	}
	wi, _ := ParseWhatIf([]string{"local=1h", "local=2h"}, []string{"aws-eu=1", "aws-eu=2"})
	if wi.Wait["local"] != 2*time.Hour || wi.Spent["aws-eu"] != 2 {
		t.Errorf("a backend given twice: %+v, want the last values", wi)
	}
}
