package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/toolgate/toolgate/workflows"
)

// A run after a timeout, as `toolgate status` prints it: what the agent
// reported shows its control and bidi characters escaped.
func TestStatusPrintsARunAfterATimeoutVisibly(t *testing.T) {
	var b bytes.Buffer
	r := result(workflows.StatusTimedOut)
	r.RanAfterEnd = &workflows.RanAfterEnd{CallID: r.CallID, Requester: "agent-1", User: "dana", Via: "the prompt\u001b[2K",
		Args: json.RawMessage("{\r\"command\": \"ls\u202e\"}"), Error: "failed\rok", CallStatus: workflows.StatusTimedOut,
		At: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}

	printResultText(&b, r)

	out := b.String()
	assert.Contains(t, out, `the tool ran anyway: dana approved it at the prompt\x1b[2K after it timed out (recorded 2030-01-02T03:04:05Z by agent-1)`)
	assert.Contains(t, out, "  it ran with: {\"command\":\"ls\\u202e\"}\n")
	assert.Contains(t, out, `  it failed: failed\rok`)
	assert.NotContains(t, out, "\r")
	assert.NotContains(t, out, "\u001b")
}
