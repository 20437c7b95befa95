package accuracy

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ReadRedisStats reads INFO commandstats and INFO cpu. The commandstats
// count since the last CONFIG RESETSTAT; CPU is cumulative: subtract the
// figure read before the run.
func ReadRedisStats(ctx context.Context, c *redis.Client) (RedisStats, error) {
	var st RedisStats
	info, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return st, err
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			f, _ := strconv.ParseFloat(val, 64)
			st.CPU += f
		case strings.HasPrefix(name, "cmdstat_"):
			calls, usec := statField(val, "calls"), statField(val, "usec")
			st.Calls += calls
			switch strings.TrimPrefix(name, "cmdstat_") {
			case "evalsha", "evalsha_ro":
				st.EvalshaCalls += calls
				st.EvalshaUsec += usec
			case "eval", "eval_ro":
				st.EvalCalls += calls
			}
		}
	}
	return st, sc.Err()
}

// SumRedisStats reads ReadRedisStats of every server of cs (each master
// of a Cluster) and adds them up: the Redis a run used, whole.
func SumRedisStats(ctx context.Context, cs []*redis.Client) (RedisStats, error) {
	var sum RedisStats
	for _, c := range cs {
		st, err := ReadRedisStats(ctx, c)
		if err != nil {
			return sum, fmt.Errorf("%s: %w", c.Options().Addr, err)
		}
		sum.EvalshaCalls += st.EvalshaCalls
		sum.EvalshaUsec += st.EvalshaUsec
		sum.EvalCalls += st.EvalCalls
		sum.Calls += st.Calls
		sum.CPU += st.CPU
	}
	return sum, nil
}

// statField returns field f of "calls=1,usec=2,...".
func statField(s, f string) int64 {
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == f {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
