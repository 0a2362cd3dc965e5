package activities

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
)

// witnessedFake is a ledger that requires cosigned decisions and records
// which entries were waited for.
type witnessedFake struct {
	next   int64
	waited []int64
}

func (f *witnessedFake) Append(_ context.Context, entries ...ledger.Entry) ([]int64, error) {
	out := make([]int64, len(entries))
	for i := range entries {
		out[i] = f.next
		f.next++
	}
	return out, nil
}

func (f *witnessedFake) RequiresCosigned() bool { return true }

func (f *witnessedFake) AwaitCosigned(_ context.Context, index int64) error {
	f.waited = append(f.waited, index)
	return nil
}

// Only a decision a tool runs after waits for the witnesses: one logged
// with its call's end (a denial) runs nothing.
func TestOnlyADecisionBeforeItsToolWaitsForTheWitnesses(t *testing.T) {
	f := &witnessedFake{}
	a := &Activities{Ledger: f}
	ctx := context.Background()
	_, err := a.AppendLedger(ctx, AppendLedgerInput{Entries: []ledger.Entry{
		{Kind: ledger.KindCallSubmitted, Event: "c1/s"}, {Kind: ledger.KindCallDecided, Event: "c1/d"}}})
	require.NoError(t, err)
	assert.Equal(t, []int64{1}, f.waited, "the approval before the tool waits for its cosigned checkpoint")

	_, err = a.AppendLedger(ctx, AppendLedgerInput{Entries: []ledger.Entry{
		{Kind: ledger.KindCallDecided, Event: "c2/d"}, {Kind: ledger.KindCallFinished, Event: "c2/f"}}})
	require.NoError(t, err)
	_, err = a.AppendLedger(ctx, AppendLedgerInput{Entries: []ledger.Entry{{Kind: ledger.KindCallSubmitted, Event: "c3/s"}}})
	require.NoError(t, err)
	assert.Equal(t, []int64{1}, f.waited, "a denial with its end, and a submission, do not wait")
}
