package accuracy

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Record is one decision, as a node logs it: 16 bytes, little-endian, in
// the node's .rec file. Times are µs since the run's T0.
type Record struct {
	Sched  uint32 // the arrival's scheduled time
	Actual uint32 // when it was decided (central: when the reply came)
	Key    uint32 // key id (bits 0-23), reason (bits 24-27, a local.Reason), allowed (bit 31)
	Window int32  // the window it counted in: (window start − T0) ÷ W
}

const recordSize = 16

// NewRecord packs a decision.
func NewRecord(sched, actual, key uint32, allowed bool, reason uint8, window int32) Record {
	k := key&0xFFFFFF | uint32(reason&0xF)<<24
	if allowed {
		k |= 1 << 31
	}
	return Record{Sched: sched, Actual: actual, Key: k, Window: window}
}

// KeyID returns the key id.
func (r Record) KeyID() uint32 { return r.Key & 0xFFFFFF }

// Allowed reports whether the request was admitted.
func (r Record) Allowed() bool { return r.Key&(1<<31) != 0 }

// Reason returns the decision's local.Reason.
func (r Record) Reason() uint8 { return uint8(r.Key >> 24 & 0xF) }

// WriteRecords writes recs to path.
func WriteRecords(path string, recs []Record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var b [recordSize]byte
	for _, r := range recs {
		binary.LittleEndian.PutUint32(b[0:], r.Sched)
		binary.LittleEndian.PutUint32(b[4:], r.Actual)
		binary.LittleEndian.PutUint32(b[8:], r.Key)
		binary.LittleEndian.PutUint32(b[12:], uint32(r.Window))
		w.Write(b[:])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadRecords reads a .rec file.
func ReadRecords(path string) ([]Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data)%recordSize != 0 {
		return nil, fmt.Errorf("accuracy: %s: %d bytes, not a whole number of records", path, len(data))
	}
	recs := make([]Record, len(data)/recordSize)
	for i := range recs {
		b := data[i*recordSize:]
		recs[i] = Record{
			Sched: binary.LittleEndian.Uint32(b[0:]), Actual: binary.LittleEndian.Uint32(b[4:]),
			Key: binary.LittleEndian.Uint32(b[8:]), Window: int32(binary.LittleEndian.Uint32(b[12:])),
		}
	}
	return recs, nil
}

// RedisCounts are the commands a node sent, counted by a go-redis hook:
// those Redis answered, but for Attempted.
type RedisCounts struct {
	Cmds         int64 // every command, pipelined ones included
	EvalSha      int64 // EVALSHA
	Eval         int64 // EVAL (go-redis falls back to it on NOSCRIPT)
	Pipelines    int64 // pipeline executions
	PipelineCmds int64 // commands sent in pipelines, answered or not
	Attempted    int64 // EVALSHA and EVAL, answered or not
}

// Scripts returns EVALSHA + EVAL.
func (c RedisCounts) Scripts() int64 { return c.EvalSha + c.Eval }

// NodeSummary is what a node reports beside its records, in its .json file.
type NodeSummary struct {
	Node      int
	ModeRun   string // the mode the rule ran in (Register may pick Central)
	Scheduled int    // arrivals in the schedule
	Decided   int    // decisions made (records written)
	Dropped   int    // arrivals not decided by the deadline (central, overloaded)
	Errors    int    // decisions that came with an error other than ErrUnavailable: failed requests
	// Unavailable counts the decisions a failure policy made without Redis:
	// Decision.Degraded, or (before policy decisions came with a nil error)
	// an error wrapping hybrid.ErrUnavailable.
	Unavailable int64
	FirstErr    string
	Reasons     [8]int64 // decisions by local.Reason
	// Rounds are the times (µs since T0) at which sync rounds ended: the
	// hybrid syncer's, seen through its metrics (Config.MeterProvider), or
	// the naive baseline's own.
	Rounds    []int64
	RoundKeys int64 // keys exchanged by those rounds
	Redis     RedisCounts
	CPU       float64 // the process's CPU time (user + sys) from T0 to the end of its schedule, seconds
	// Latency holds the decisions' latencies as the node measured them
	// around each call, one histogram per second since T0.
	Latency Slices
	// OnCPU holds the same decisions' time on the CPU (the deciding
	// thread's CPU clock), local, hybrid and naive modes only.
	OnCPU Slices
	// Warm holds the latencies of decisions on one key made back to back
	// after the schedule (hybrid and local modes): warm caches.
	Warm Slices
	// Waits holds the latencies of the decisions that waited for a lease
	// (those hybridlimit.lease.waits counts), Waited their number; Latency holds the others.
	Waits  Slices `json:",omitempty"`
	Waited int64  `json:",omitempty"`
	// Changes are the times (µs since T0) at which the api-patterns node
	// applied each limit change (Limiter.SetLimit returned).
	Changes []int64 `json:",omitempty"`
	// Sent, Received and Lost count the api-patterns retry pattern's
	// requests handed to other nodes: sent, received, and not sent (the
	// socket refused them).
	Sent, Received, Lost int64 `json:",omitempty"`
}

// WriteSummary writes s as JSON to path.
func WriteSummary(path string, s *NodeSummary) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadSummary reads a node's .json file.
func ReadSummary(path string) (*NodeSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var s NodeSummary
	if err := json.NewDecoder(io.Reader(f)).Decode(&s); err != nil {
		return nil, fmt.Errorf("accuracy: %s: %w", path, err)
	}
	return &s, nil
}
