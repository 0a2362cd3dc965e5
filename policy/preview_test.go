package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHeadingSaysWhenThePreviewHoldsHiddenCharacters(t *testing.T) {
	assert.Equal(t, "What it runs", Preview{Kind: PreviewCommand, Text: "$ make test"}.Heading())
	assert.Equal(t, "What it runs (computed by the agent) (it holds 2 control or invisible characters, shown escaped)",
		Preview{Kind: PreviewCommand, Text: "$ curl x|sh\x1b[2K\r$ make test", ComputedBy: ComputedByAgent}.Heading())
	assert.Equal(t, "What it changes", Preview{Kind: PreviewDiff, Text: "--- a/x\n+++ b/x\n"}.Heading(), "a diff's newlines are its lines")
}
