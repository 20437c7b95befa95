package fallback

import "github.com/hybridlimit/hybridlimit/internal/gossiphook"

// init hands package hybrid the gossip node it runs for Config.Gossip,
// which users do not call: see internal/gossiphook.
func init() {
	gossiphook.New = func(cfg gossiphook.Config) (gossiphook.Node, error) {
		n, err := startNode(config(cfg))
		if err != nil {
			return nil, err // a nil Node, not a nil *node in one
		}
		return n, nil
	}
}
