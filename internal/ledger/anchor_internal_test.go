package ledger

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// TestAnchorStoreIsMonotonic: writers racing on one anchor file (goroutines
// here; processes take the same flock) leave the highest record, and a
// lower one never replaces a higher one unless forced.
func TestAnchorStoreIsMonotonic(t *testing.T) {
	a := NewAnchor(filepath.Join(t.TempDir(), "ledger.anchor"))
	var wg sync.WaitGroup
	for i := 1; i <= 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := int64((i * 17) % 41) // 1…40 in a scrambled order
			if _, _, err := a.store(AnchorState{Seq: seq, MAC: fmt.Sprintf("mac-%d", seq), StreamID: "1-1"}, false); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	st, ok, err := a.Load()
	if err != nil || !ok || st.Seq != 40 || st.MAC != "mac-40" {
		t.Fatalf("anchor after the race: %+v ok %v, %v", st, ok, err)
	}
	if prev, wrote, err := a.store(AnchorState{Seq: 39, MAC: "mac-39"}, false); err != nil || wrote || prev.Seq != 40 {
		t.Fatalf("lower store: wrote %v, prev %+v, %v", wrote, prev, err)
	}
	if _, wrote, err := a.store(AnchorState{Seq: 2, MAC: "mac-2", StreamID: "1-1"}, true); err != nil || !wrote {
		t.Fatalf("forced store: wrote %v, %v", wrote, err)
	}
	if st, _, _ := a.Load(); st.Seq != 2 {
		t.Fatalf("anchor after a forced store: %+v", st)
	}
}
