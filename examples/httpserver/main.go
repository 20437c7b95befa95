// Command httpserver is the smallest real server behind the httplimit
// middleware: GET / is limited to 5 requests per 10 seconds per client IP.
// Without -redis the limit is kept on this node (local mode); with it, the
// limit holds across every node sharing the Redis server (hybrid mode).
//
// Usage:
//
//	go run ./examples/httpserver -addr 127.0.0.1:8080
//	go run ./examples/httpserver -addr 127.0.0.1:8080 -redis 127.0.0.1:6379
//	curl -i http://127.0.0.1:8080/
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	redisAddr := flag.String("redis", "", "Redis address (host:port); empty for local mode")
	proxies := flag.String("trusted-proxies", "", "comma-separated CIDRs of trusted proxies; empty: the client is the socket's peer")
	flag.Parse()
	if err := run(*addr, *redisAddr, *proxies); err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}

func run(addr, redisAddr, proxies string) error {
	cfg := hybrid.Config{}
	if redisAddr != "" {
		rc := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer rc.Close()
		cfg.Redis = rc
	}
	l, err := hybrid.New(cfg)
	if err != nil {
		return err
	}
	defer l.Close()

	mcfg := httplimit.Config{
		Rules: []httplimit.Rule{{
			ID: "root-per-ip", Key: httplimit.KeyIP, Endpoint: "GET /{$}",
			Algorithm: hybrid.FixedWindow, Quota: 5, Window: 10 * time.Second,
		}},
		RateLimitHeaders: true,
	}
	if proxies != "" {
		mcfg.TrustedProxies = strings.Split(proxies, ",")
	}
	m, err := httplimit.New(l, mcfg)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from hybridlimit\n")
	})
	srv := &http.Server{Addr: addr, Handler: m.Handler(mux), ReadHeaderTimeout: 5 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	mode := "local"
	if redisAddr != "" {
		mode = "hybrid, Redis " + redisAddr
	}
	slog.Info("httpserver: listening", "addr", addr, "mode", mode, "limit", "GET / 5 per 10s per client IP")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
