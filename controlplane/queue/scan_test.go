package queue

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The scan's destinations are sized from the select list: its items are
// the commas outside parentheses, plus one, so a coalesce(x, y) counts
// once.
func TestCountColumnsCountsTheItemsOfASelectList(t *testing.T) {
	require.Equal(t, 1, countColumns("c.id"))
	require.Equal(t, 3, countColumns("c.id, coalesce(c.idempotency_key, ''), c.state"))
	require.Equal(t, 2, countColumns("f(a, g(b, c)), d"))
}
