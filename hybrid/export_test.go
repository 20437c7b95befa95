package hybrid

// Defaults the tests of package hybrid_test use.
const (
	DefaultTimeout = defaultTimeout
	DefaultShards  = defaultShards
)
