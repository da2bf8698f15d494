package aws

import (
	"testing"

	"github.com/lathe-ml/lathe/internal/cloud"
	"github.com/lathe-ml/lathe/internal/cloud/cloudtest"
)

// TestCloudConformance runs the cloud.Backend conformance suite against
// Backend.Cloud on moto_server (an emulator of EC2, not AWS itself), each
// check on its own moto.
func TestCloudConformance(t *testing.T) {
	t.Parallel()
	cloudtest.Run(t, func(t *testing.T) cloud.Backend {
		tb := setup(t)
		return tb.backend(t, tb.moto.URL(), tb.cfg).Cloud()
	})
}
