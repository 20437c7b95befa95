package fallback

import (
	"encoding/binary"
	"errors"
	"math"
)

// Wire format. A record message is
//
//	0x01 | uvarint len(origin) | origin | digest[16] | varint window |
//	uvarint seq | uvarint consumed | float32 demand (big endian)
//
// and a push/pull state is 0x02 | uvarint count | count × (uvarint
// len(origin) | origin | the record's fields as above). Nothing on the wire
// names a user key: only the caller's digest.
const (
	msgRecord byte = 1
	msgState  byte = 2

	// maxOrigin bounds a node name on the wire, so a record always fits a
	// packet with room to spare.
	maxOrigin = 128
	// maxCount bounds a count, as the rest of the library keeps counts
	// exact in a double.
	maxCount = 1 << 53
	// maxRecordLen is the longest encoded record message.
	maxRecordLen = 1 + binary.MaxVarintLen64 + maxOrigin + digestSize + 3*binary.MaxVarintLen64 + 4
)

// errMalformed is what the decoders return for input they reject.
var errMalformed = errors.New("fallback: malformed message")

// record is one node's figures for one key: what it consumed in a window and
// the demand it sees, as a moving average of requests per second including
// refused ones. seq orders a node's records for a key: a higher one
// replaces a lower one.
type record struct {
	origin   string
	key      digest
	window   int64
	seq      uint64
	consumed int64
	demand   float64
}

// appendRecord appends r as a record message.
func appendRecord(b []byte, r *record) []byte {
	b = append(b, msgRecord)
	return appendBody(b, r)
}

func appendBody(b []byte, r *record) []byte {
	b = binary.AppendUvarint(b, uint64(len(r.origin)))
	b = append(b, r.origin...)
	b = append(b, r.key[:]...)
	b = binary.AppendVarint(b, r.window)
	b = binary.AppendUvarint(b, r.seq)
	b = binary.AppendUvarint(b, uint64(r.consumed))
	return binary.BigEndian.AppendUint32(b, math.Float32bits(float32(min(r.demand, math.MaxFloat32))))
}

// decodeRecord decodes a record message, rejecting anything but exactly one
// well-formed record.
func decodeRecord(b []byte) (record, error) {
	if len(b) == 0 || b[0] != msgRecord {
		return record{}, errMalformed
	}
	r, rest, err := decodeBody(b[1:])
	if err != nil || len(rest) != 0 {
		return record{}, errMalformed
	}
	return r, nil
}

func decodeBody(b []byte) (record, []byte, error) {
	var r record
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > maxOrigin || uint64(len(b)-k) < n {
		return r, nil, errMalformed
	}
	b = b[k:]
	r.origin = string(b[:n])
	b = b[n:]
	if len(b) < digestSize {
		return r, nil, errMalformed
	}
	copy(r.key[:], b)
	b = b[digestSize:]
	w, k := binary.Varint(b)
	if k <= 0 {
		return r, nil, errMalformed
	}
	r.window, b = w, b[k:]
	s, k := binary.Uvarint(b)
	if k <= 0 {
		return r, nil, errMalformed
	}
	r.seq, b = s, b[k:]
	c, k := binary.Uvarint(b)
	if k <= 0 || c > maxCount {
		return r, nil, errMalformed
	}
	r.consumed, b = int64(c), b[k:]
	if len(b) < 4 {
		return r, nil, errMalformed
	}
	d := float64(math.Float32frombits(binary.BigEndian.Uint32(b)))
	if math.IsNaN(d) || math.IsInf(d, 0) || d < 0 {
		return r, nil, errMalformed
	}
	r.demand = d
	return r, b[4:], nil
}

// appendState appends recs as a push/pull state.
func appendState(b []byte, recs []*record) []byte {
	b = append(b, msgState)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = appendBody(b, r)
	}
	return b
}

// decodeState decodes a push/pull state. It returns the records decoded
// before the first malformed one, with errMalformed if there was one, and
// never more records than the input could hold.
func decodeState(b []byte) ([]record, error) {
	if len(b) == 0 || b[0] != msgState {
		return nil, errMalformed
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 {
		return nil, errMalformed
	}
	b = b[1+k:]
	// The shortest body is 1+1+16+1+1+1+4 bytes: a count beyond what the
	// input can hold is malformed, and never sizes an allocation.
	const minBody = 25
	if n > uint64(len(b)/minBody) {
		return nil, errMalformed
	}
	out := make([]record, 0, n)
	for range n {
		r, rest, err := decodeBody(b)
		if err != nil {
			return out, errMalformed
		}
		out = append(out, r)
		b = rest
	}
	if len(b) != 0 {
		return out, errMalformed
	}
	return out, nil
}
