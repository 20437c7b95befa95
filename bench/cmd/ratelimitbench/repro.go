package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hybridlimit/hybridlimit/envoy/rls"
)

// repro is a REPRODUCTION of envoyproxy/ratelimit's decision path with its
// Redis fixed-window cache, written for this benchmark from that project's
// documentation, not its code: per request one pipeline to Redis of INCRBY
// key hits_addend and EXPIRE key window per limited descriptor, the key
// being the domain, the descriptor's entries and the window's start; a
// descriptor is OVER_LIMIT when its count after the increment passes the
// limit. A Redis error fails the whole request (envoyproxy/ratelimit
// answers an error; Envoy's filter then admits unless failure_mode_deny).
// It matches only this benchmark's configuration: first-level descriptors
// with a key and no value.
type repro struct {
	rlsv3.UnimplementedRateLimitServiceServer
	rdb    *redis.Client
	domain string
	limits map[string]*rls.RateLimit // by descriptor key
	window map[string]int64          // seconds, by descriptor key
	units  map[string]rlsv3.RateLimitResponse_RateLimit_Unit
}

var unitSeconds = map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400}

// newRepro reads the benchmark's configuration file for the reproduction.
func newRepro(rdb *redis.Client, path string) (*repro, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := rls.Parse(data)
	if err != nil {
		return nil, err
	}
	r := &repro{rdb: rdb, domain: f.Domain, limits: map[string]*rls.RateLimit{}, window: map[string]int64{},
		units: map[string]rlsv3.RateLimitResponse_RateLimit_Unit{}}
	for _, d := range f.Descriptors {
		if d.Value != "" || d.RateLimit == nil || len(d.Descriptors) > 0 || unitSeconds[d.RateLimit.Unit] == 0 {
			return nil, fmt.Errorf("repro: descriptor %q: only first-level keys with a second/minute/hour/day limit", d.Key)
		}
		r.limits[d.Key] = d.RateLimit
		r.window[d.Key] = unitSeconds[d.RateLimit.Unit]
		r.units[d.Key] = rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[map[string]string{
			"second": "SECOND", "minute": "MINUTE", "hour": "HOUR", "day": "DAY"}[d.RateLimit.Unit]])
	}
	return r, nil
}

// ShouldRateLimit decides as the type's comment says.
func (r *repro) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	now := nowUnix()
	descs := req.GetDescriptors()
	incr := make([]*redis.IntCmd, len(descs))
	pipe := r.rdb.Pipeline()
	for i, d := range descs {
		es := d.GetEntries()
		if req.GetDomain() != r.domain || len(es) != 1 || r.limits[es[0].GetKey()] == nil {
			continue
		}
		k := es[0].GetKey()
		w := r.window[k]
		key := req.GetDomain() + "_" + k + "_" + es[0].GetValue() + "_" + strconv.FormatInt(now/w*w, 10)
		incr[i] = pipe.IncrBy(ctx, key, hits)
		pipe.Expire(ctx, key, secondsDur(w))
	}
	if pipe.Len() > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, status.Errorf(codes.Unavailable, "redis: %v", err)
		}
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))}
	for i, d := range descs {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		if incr[i] == nil {
			continue
		}
		k := d.GetEntries()[0].GetKey()
		lim, w := int64(r.limits[k].RequestsPerUnit), r.window[k]
		after := incr[i].Val()
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(lim), Unit: r.units[k]}
		st.DurationUntilReset = durationpb.New(secondsDur(w - now%w))
		if after > lim {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		} else {
			st.LimitRemaining = uint32(lim - after)
		}
	}
	return resp, nil
}

// serveRepro runs the reproduction on addr until the process is killed.
func serveRepro(addr, redisAddr, config string) error {
	// envoyproxy/ratelimit's default pool is 10 connections.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 10, ContextTimeoutEnabled: true, MaxRetries: -1})
	r, err := newRepro(rdb, config)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, r)
	registerHealth(g)
	return g.Serve(ln)
}
