package hybrid

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hybridlimit/hybridlimit/internal/synchook"
)

// traceRound records a sync round as a span, after the fact, from its
// start to now: "hybridlimit.sync" (or "hybridlimit.sync.first" for a
// first-lease round), and "hybridlimit.handback" for the first round that
// reached Redis after an outage, the one that reports what was admitted
// without it. Rounds are a few per second at most: never a span per
// decision.
func (l *Limiter) traceRound(st synchook.RoundStats) {
	end := time.Now()
	name := "hybridlimit.sync"
	if st.First {
		name = "hybridlimit.sync.first"
	}
	attrs := []attribute.KeyValue{
		attribute.Int("hybridlimit.sync.keys", st.Keys),
		attribute.Int("hybridlimit.sync.synced", st.Synced),
		attribute.Int("hybridlimit.sync.failed", st.Failed),
		attribute.Int("hybridlimit.sync.pipelines", st.Pipeline),
	}
	if st.Err == nil && (st.Synced > 0 || st.Registered) && l.handBack.Swap(false) {
		name = "hybridlimit.handback"
		outage := end.Sub(time.UnixMicro(l.outageAt.Load()))
		attrs = append(attrs, attribute.Float64("hybridlimit.outage.seconds", outage.Seconds()))
	}
	_, span := l.tracer.Start(context.Background(), name, trace.WithTimestamp(end.Add(-st.Took)),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if st.Err != nil {
		span.SetStatus(codes.Error, st.Err.Error())
	}
	span.End(trace.WithTimestamp(end))
}
