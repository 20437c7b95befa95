package local

import "errors"

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidConfig reports an invalid Limit or Config: New, SetLimit
	// and Limit.Validate return it wrapped with the name of the field, and
	// Reserve and Wait on a Limiter whose algorithm cannot delay requests
	// (only the bucket algorithms can).
	ErrInvalidConfig = errors.New("local: invalid config")
	// ErrLimitExceeded is returned by Wait when the request cannot be
	// admitted before the context's deadline, or never (cost above the
	// burst), or when the key table is full.
	ErrLimitExceeded = errors.New("local: rate limit exceeded")
)
