package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/toolgate/toolgate/workflows"
)

// assertNoVersionMarker asserts that a call this release began records no
// version marker and never writes TemporalChangeVersion: its evaluation
// says it began at the workflows' baseline (issue 51). Each marker cost
// the call a search-attribute write, one visibility update more than a
// bare workflow on the way to waiting for a person. What it does write
// is its status: pending with its groups, and its end.
func assertNoVersionMarker(t *testing.T, d *devEnv, callID string) {
	t.Helper()
	tc := d.temporal()
	defer tc.Close()
	it := tc.GetWorkflowHistory(context.Background(), workflows.CallWorkflowID(callID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var statuses []string
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if m := ev.GetMarkerRecordedEventAttributes(); m != nil {
			assert.NotEqual(t, "Version", m.GetMarkerName(), "call %s recorded a version marker (event %d)", callID, ev.GetEventId())
		}
		if u := ev.GetUpsertWorkflowSearchAttributesEventAttributes(); u != nil {
			fields := u.GetSearchAttributes().GetIndexedFields()
			assert.NotContains(t, fields, "TemporalChangeVersion", "call %s wrote its change versions (event %d)", callID, ev.GetEventId())
			if p, ok := fields[workflows.AttrStatus.GetName()]; ok {
				statuses = append(statuses, string(p.GetData()))
			}
		}
	}
	assert.NotEmpty(t, statuses)
	assert.Contains(t, statuses[0], string(workflows.StatusPending), "the first write is the call's wait for a person")
}
