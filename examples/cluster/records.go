package main

import (
	"bytes"
	"fmt"
	"strconv"
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
