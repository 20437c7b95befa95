package syncer

import (
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
)

// What the module's other packages need of this one and users do not: the
// hybrid mode's syncer, central decisions at a given time and over several
// rules, and the names of keys. internal/syncx asserts each function's type
// once and offers it typed; see internal/synchook.
func init() {
	synchook.NewSyncer = func(t synchook.Tuning, c redis.UniversalClient, ks Keyspace, clock local.Clock, obs synchook.Observer, passTime bool, g *synchook.Global) (synchook.Syncer[*Rule], error) {
		s, err := newSyncer(syncConfig{Tuning: t, Client: c, Keyspace: ks, Clock: clock, Observer: obs, PassTime: passTime, Global: g})
		if err != nil {
			return nil, err // a nil interface, not a nil *syncer in one
		}
		return s, nil
	}
	synchook.ErrNotLeasable = errNotLeasable
	synchook.ValidRuleName = validRuleName
	synchook.Digest = (*Keyspace).digest
	synchook.Keys = (*Keyspace).ruleKeys
	synchook.NewRule = newRule
	synchook.AllowNAt = (*Central).allowNAt
	synchook.AllowMulti = (*Central).allowMulti
	synchook.AllowMultiCharge = (*Central).allowMultiCharge
	synchook.Preload = (*Central).preload
}
