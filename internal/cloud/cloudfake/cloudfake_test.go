package cloudfake_test

import (
	"testing"

	"github.com/lathe-ml/lathe/internal/cloud"
	"github.com/lathe-ml/lathe/internal/cloud/cloudfake"
	"github.com/lathe-ml/lathe/internal/cloud/cloudtest"
)

// TestConformance: the fake passes the suite every backend passes, so
// tests built on it rely only on what cloud.Backend promises.
func TestConformance(t *testing.T) {
	cloudtest.Run(t, func(*testing.T) cloud.Backend { return cloudfake.New("fake") })
}
