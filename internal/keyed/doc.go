// Package keyed is the sharded table of per-key values that the local and
// hybrid limiters keep their keys in (Store), and the one protocol for
// locking its entries: one key's (Store.Lock), or several in one global
// order, each distinct entry once (LockAll).
package keyed
