package gossiphook

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEstimateUnknownIsEven(t *testing.T) {
	e := Estimate{Share: 1.0 / 3, Members: 3}
	assert.Equal(t, int64(33), e.Allowance(100))
	assert.False(t, math.IsNaN(e.Share))
}

func TestAllowanceIn(t *testing.T) {
	e := Estimate{Known: true, Window: 4, Own: 30, Total: 80, Share: 0.5, Members: 2}
	assert.Equal(t, int64(30+10), e.AllowanceIn(4, 100), "the snapshot's window")
	assert.Equal(t, int64(50), e.AllowanceIn(5, 100), "a window no record names yet")
}
