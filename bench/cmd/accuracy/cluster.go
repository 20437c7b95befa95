package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/internal/proc"
)

// cluster is the private three-master Redis Cluster of the api-users
// Cluster rows, with a client of each master: flushed, its statistics
// reset and its INFO read master by master, so a run's Redis figures are
// the sum over the masters.
type cluster struct {
	addrs   []string
	masters []*redis.Client
	kill    func()
	once    sync.Once
}

// startCluster starts the Cluster in dir/cluster and waits until it is ok
// on every node.
func startCluster(ctx context.Context, dir string) (*cluster, error) {
	addrs, kill, err := proc.Cluster(filepath.Join(dir, "cluster"))
	if err != nil {
		return nil, fmt.Errorf("redis cluster: %w", err)
	}
	c := &cluster{addrs: addrs, kill: kill}
	for _, a := range addrs {
		m := redis.NewClient(&redis.Options{Addr: a, DialTimeout: time.Second})
		c.masters = append(c.masters, m)
		if err := m.Ping(ctx).Err(); err != nil {
			c.stop()
			return nil, fmt.Errorf("redis cluster: master %s: %w", a, err)
		}
	}
	fmt.Fprintf(os.Stderr, "accuracy: private Redis Cluster, masters %s\n", strings.Join(addrs, " "))
	return c, nil
}

// stop closes the clients and kills every node (SIGKILL, by its PID);
// safe to call more than once.
func (c *cluster) stop() {
	c.once.Do(func() {
		for _, m := range c.masters {
			m.Close()
		}
		c.kill()
	})
}
