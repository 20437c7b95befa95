// Package hybrid is hybridlimit's public Limiter: rules decided locally,
// centrally in Redis, or in hybrid mode, where each node decides in
// nanoseconds against leases of the global budget that a background syncer
// exchanges with Redis.
//
// See docs/accuracy.md for the hybrid mode's bounds and measurements.
package hybrid
