package aws

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"
)

// ErrNoCapacity is matched (errors.Is) by a *NoCapacityError: every choice
// in every subnet of the backend was refused for capacity. The caller makes
// the job wait in this backend's site; it never tries another region.
var ErrNoCapacity = errors.New("aws: no capacity")

// ErrNoFit is returned by Launch when no allowed instance type has the GPUs
// the request needs: the job can never run on this backend (routing should
// not have sent it here), unlike ErrNoCapacity.
var ErrNoFit = errors.New("aws: no allowed instance type fits")

// ErrNotFound is returned by Describe for an instance EC2 does not know
// (never launched, or terminated long enough ago to be forgotten).
var ErrNotFound = errors.New("aws: instance not found")

// ErrNotManaged is returned by Terminate for an instance that is not tagged
// lathe:managed=true with this backend's cluster: Lathe never terminates
// what it did not launch.
var ErrNotManaged = errors.New("aws: instance not managed by this cluster")

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

// Is makes errors.Is(err, ErrNoCapacity) true.
func (e *NoCapacityError) Is(target error) bool { return target == ErrNoCapacity }

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
