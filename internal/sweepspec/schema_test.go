package sweepspec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestJobFieldMatchesJobspec: the paths jobField accepts are exactly the
// fields jobspec.Parse knows. Every scalar field of jobspec.Spec's schema,
// set in a job and parsed, is no unknown field; paths jobField refuses as
// unknown are unknown to jobspec too.
func TestJobFieldMatchesJobspec(t *testing.T) {
	base := map[string]any{"name": "j", "base_model": "m", "dataset": "s3://bucket/k"}
	s := &Sweep{Priority: jobspec.PriorityNormal}
	unknownTo := func(path string, v any) bool {
		_, err := jobspec.Parse(s.trialJSON(base, "j", []jobtype.Param{{Path: path, Value: v}}))
		if err == nil {
			return false
		}
		for _, fe := range err.(*jobspec.ValidationError).Errors {
			if fe.Message == "unknown field" && strings.HasPrefix(path+".", fe.Field+".") {
				return true
			}
		}
		return false
	}
	sample := map[fieldKind]any{fieldString: "x", fieldInt: int64(1), fieldFloat: 0.5, fieldDuration: "1h"}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			path := join(prefix, name)
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(path, f.Type)
				continue
			}
			kind, why := jobField(path)
			switch {
			case f.Type.Kind() == reflect.Slice:
				if why == "" {
					t.Errorf("%s: a list, accepted", path)
				}
			case why != "" && !strings.HasPrefix(why, "cannot be swept"):
				t.Errorf("%s: refused: %s", path, why)
			case why == "" && unknownTo(path, sample[kind]):
				t.Errorf("%s: accepted, but jobspec does not know it", path)
			}
		}
	}
	walk("", reflect.TypeFor[jobspec.Spec]())
	for _, path := range []string{"lora.rnk", "foo", "training.lr", "resources.gpus_count"} {
		if _, why := jobField(path); !strings.Contains(why, "not a field") || !unknownTo(path, int64(1)) {
			t.Errorf("%s: jobField says %q; jobspec knows it: %v", path, why, !unknownTo(path, int64(1)))
		}
	}
}
