package aws

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/lathe-ml/lathe/internal/cloud"
)

// ErrNoCapacity is matched (errors.Is) by a *NoCapacityError: every choice
// in every subnet of the backend was refused for capacity. The caller makes
// the job wait in this backend's site; it never tries another region.
var ErrNoCapacity error = &seamError{"aws: no capacity", cloud.ErrNoCapacity}

// ErrNoFit is returned by Launch when no allowed instance type has the GPUs
// the request needs: the job can never run on this backend (routing should
// not have sent it here), unlike ErrNoCapacity.
var ErrNoFit error = &seamError{"aws: no allowed instance type fits", cloud.ErrNoFit}

// ErrNotFound is returned by Describe for an instance EC2 does not know
// (never launched, or terminated long enough ago to be forgotten).
var ErrNotFound error = &seamError{"aws: instance not found", cloud.ErrNotFound}

// ErrNotManaged is returned by Terminate for an instance that is not tagged
// lathe:managed=true with this backend's cluster: Lathe never terminates
// what it did not launch.
var ErrNotManaged error = &seamError{"aws: instance not managed by this cluster", cloud.ErrNotManaged}

// seamError is a sentinel of this package that also matches (errors.Is)
// its cloud package counterpart, so callers of the cloud.Backend seam
// branch on cloud's errors while the messages stay this package's.
type seamError struct {
	msg  string
	seam error
}

func (e *seamError) Error() string { return e.msg }

// Is makes errors.Is(err, cloud.ErrX) true for this package's ErrX.
func (e *seamError) Is(target error) bool { return target == e.seam }

// NoCapacityError lists every launch attempt and why it was refused.
type NoCapacityError struct {
	Attempts []LaunchAttempt
}

func (e *NoCapacityError) Error() string {
	parts := make([]string, 0, len(e.Attempts))
	for _, a := range e.Attempts {
		parts = append(parts, a.String())
	}
	return fmt.Sprintf("aws: no capacity after %d attempts: %s", len(e.Attempts), strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrNoCapacity) and errors.Is(err,
// cloud.ErrNoCapacity) true.
func (e *NoCapacityError) Is(target error) bool {
	return target == ErrNoCapacity || target == cloud.ErrNoCapacity
}

// capacityCodes are RunInstances error codes that mean "not here, not now":
// the next subnet or choice may work.
var capacityCodes = map[string]bool{
	"InsufficientInstanceCapacity":      true,
	"InsufficientCapacity":              true,
	"InsufficientHostCapacity":          true,
	"InsufficientFreeAddressesInSubnet": true,
	"SpotMaxPriceTooLow":                true,
	"MaxSpotInstanceCountExceeded":      true,
	"VcpuLimitExceeded":                 true,
	"Unsupported":                       true,
}

// throttleCodes are error codes that mean "slow down": the same call again
// after a backoff.
var throttleCodes = map[string]bool{
	"RequestLimitExceeded": true,
	"Throttling":           true,
	"ThrottlingException":  true,
}

// errorCode is the AWS error code of err, or "" when it has none.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func errorMessage(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorMessage()
	}
	return err.Error()
}
