package accuracy

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// cmdCounter is a go-redis hook that counts what a client's commands did:
// those Redis answered (a reply, or an error reply such as NOSCRIPT), EVALSHA
// and EVAL among them, and pipelines; and the scripts attempted, answered or
// not (a pipeline whose deadline passed is counted there only). It is safe
// for concurrent use.
type cmdCounter struct {
	cmds, evalsha, eval, pipes, pipeCmds, attempted atomic.Int64
}

var _ redis.Hook = (*cmdCounter)(nil)

func (c *cmdCounter) count(cmd redis.Cmder) {
	name := strings.ToLower(cmd.Name())
	script := strings.HasPrefix(name, "eval")
	if script {
		c.attempted.Add(1)
	}
	if err := cmd.Err(); err != nil {
		var re redis.Error
		if !errors.As(err, &re) {
			return // no answer: a timeout, a broken connection
		}
	}
	c.cmds.Add(1)
	switch name {
	case "evalsha", "evalsha_ro":
		c.evalsha.Add(1)
	case "eval", "eval_ro":
		c.eval.Add(1)
	}
}

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.count(cmd)
		return err
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		c.pipes.Add(1)
		c.pipeCmds.Add(int64(len(cmds)))
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return err
	}
}

func (c *cmdCounter) snapshot() RedisCounts {
	return RedisCounts{
		Cmds: c.cmds.Load(), EvalSha: c.evalsha.Load(), Eval: c.eval.Load(),
		Pipelines: c.pipes.Load(), PipelineCmds: c.pipeCmds.Load(), Attempted: c.attempted.Load(),
	}
}

// rounds records when sync rounds end. The hybrid Limiter reports each
// round of its syncer to its MeterProvider (the counter
// hybridlimit.sync.rounds, and the keys exchanged on
// hybridlimit.sync.keys): roundMeterProvider turns those calls into
// timestamps. It is the one public view of the syncer's rounds;
// Config.Sync.Observer is replaced by the Limiter's own.
type rounds struct {
	t0   int64 // µs since the epoch
	mu   sync.Mutex
	at   []int64 // µs since t0
	keys atomic.Int64
}

func (r *rounds) round() {
	now := time.Now().UnixMicro() - r.t0
	r.mu.Lock()
	r.at = append(r.at, now)
	r.mu.Unlock()
}

func (r *rounds) times() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.at...)
}

// roundMeterProvider is an OpenTelemetry MeterProvider that records the
// hybrid Limiter's sync rounds and does nothing else.
type roundMeterProvider struct {
	noop.MeterProvider
	r *rounds
}

func (p roundMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return roundMeter{r: p.r}
}

type roundMeter struct {
	noop.Meter
	r *rounds
}

func (m roundMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	switch name {
	case "hybridlimit.sync.rounds":
		return roundCounter{r: m.r}, nil
	case "hybridlimit.sync.keys":
		return keysCounter{r: m.r}, nil
	}
	return noop.Int64Counter{}, nil
}

type roundCounter struct {
	noop.Int64Counter
	r *rounds
}

func (c roundCounter) Add(context.Context, int64, ...metric.AddOption) { c.r.round() }
func (c roundCounter) Enabled(context.Context) bool                    { return true }

type keysCounter struct {
	noop.Int64Counter
	r *rounds
}

func (c keysCounter) Add(_ context.Context, n int64, _ ...metric.AddOption) { c.r.keys.Add(n) }
func (c keysCounter) Enabled(context.Context) bool                          { return true }
