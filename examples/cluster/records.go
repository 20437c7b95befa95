package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The outcomes a node records for a request.
const (
	outcomeAdmitted = 'a' // the middleware let it through
	outcomeRefused  = 'r' // 429
	outcomeFailed   = 'f' // any other status
)

// record is one request a node decided: when, on Redis's clock, for which
// client, and the outcome; exact is what the exact replay decides for it.
type record struct {
	at      int64 // µs since the epoch on Redis's clock: when the node began deciding it
	key     string
	node    int // 0-based
	outcome byte
	exact   bool // admitted by the exact replay (set by replay)
}

// appendRecord appends r's line, "AT KEY OUTCOME\n", to b: about 25 bytes a
// request. The node is the file's.
func appendRecord(b []byte, at int64, key string, outcome byte) []byte {
	b = strconv.AppendInt(b, at, 10)
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, ' ', outcome, '\n')
	return b
}

// parseRecords parses the complete lines of data, node's records, and
// returns them with what follows the last newline (a line still being
// written), to be read again with the next bytes.
func parseRecords(data []byte, node int) (recs []record, rest []byte, err error) {
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return recs, data, nil
		}
		line := data[:i]
		data = data[i+1:]
		atField, tail, ok1 := bytes.Cut(line, []byte{' '})
		key, out, ok2 := bytes.Cut(tail, []byte{' '})
		if !ok1 || !ok2 || len(out) != 1 || len(key) == 0 {
			return recs, nil, fmt.Errorf("node n%d's records: bad line %q", node+1, line)
		}
		at, err := strconv.ParseInt(string(atField), 10, 64)
		if err != nil {
			return recs, nil, fmt.Errorf("node n%d's records: bad time in %q", node+1, line)
		}
		switch out[0] {
		case outcomeAdmitted, outcomeRefused, outcomeFailed:
		default:
			return recs, nil, fmt.Errorf("node n%d's records: bad outcome in %q", node+1, line)
		}
		recs = append(recs, record{at: at, key: string(key), node: node, outcome: out[0]})
	}
}

// recordLog is a node's file of records: the requests it decided, appended
// as they end and written out when the driver asks for /stats (and when the
// node stops), so that a reply to /stats means every request decided before
// it is in the file. Safe for concurrent use.
type recordLog struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	buf    []byte
	offset int64 // µs: Redis's clock − this node's, measured at start
}

func newRecordLog(path string, offset int64) (*recordLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &recordLog{f: f, w: bufio.NewWriterSize(f, 64<<10), offset: offset}, nil
}

// add records one request the node began deciding at start (its clock).
func (l *recordLog) add(start time.Time, key string, outcome byte) {
	l.mu.Lock()
	l.buf = appendRecord(l.buf[:0], start.UnixMicro()+l.offset, key, outcome)
	l.w.Write(l.buf)
	l.mu.Unlock()
}

// flush writes the records buffered to the file.
func (l *recordLog) flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Flush()
}

func (l *recordLog) close() error {
	return errors.Join(l.flush(), l.f.Close())
}

// recordTail reads a node's records file as it grows.
type recordTail struct {
	node int
	f    *os.File
	rest []byte // a line not complete at the last read
}

func openRecordTail(path string, node int) (*recordTail, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &recordTail{node: node, f: f}, nil
}

// read returns the records written since the last read.
func (t *recordTail) read() ([]record, error) {
	data, err := io.ReadAll(t.f)
	if err != nil {
		return nil, err
	}
	recs, rest, err := parseRecords(append(t.rest, data...), t.node)
	t.rest = bytes.Clone(rest)
	return recs, err
}

func (t *recordTail) close() error { return t.f.Close() }

// timeSample is one TIME call to Redis: the local clock when it was sent
// and when its reply came, and Redis's time in the reply, all µs.
type timeSample struct {
	sent, redis, recv int64
}

// offsetOf returns Redis's clock − the local clock from the sample with the
// shortest round trip, taking Redis's reading to be at its middle as the
// syncer does; the error is at most half that round trip, which it returns.
func offsetOf(samples []timeSample) (offset, rtt int64, ok bool) {
	for i, s := range samples {
		if d := s.recv - s.sent; i == 0 || d < rtt {
			offset, rtt, ok = s.redis-(s.sent+s.recv)/2, d, true
		}
	}
	return offset, rtt, ok
}

// timeSamples is how many TIME calls measureOffset makes.
const timeSamples = 9

// measureOffset measures Redis's clock − this process's (time.Now), in µs,
// from a few TIME calls: windows are aligned to Redis's clock, so the driver
// schedules by it and the nodes record on it.
func measureOffset(ctx context.Context, c redis.Cmdable) (int64, error) {
	samples := make([]timeSample, 0, timeSamples)
	var err error
	for range timeSamples {
		sent := time.Now()
		var t time.Time
		if t, err = c.Time(ctx).Result(); err != nil {
			continue
		}
		samples = append(samples, timeSample{sent: sent.UnixMicro(), redis: t.UnixMicro(), recv: time.Now().UnixMicro()})
	}
	off, _, ok := offsetOf(samples)
	if !ok {
		return 0, fmt.Errorf("ask Redis the time: %w", err)
	}
	return off, nil
}
