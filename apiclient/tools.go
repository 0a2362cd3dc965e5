package apiclient

import (
	"context"
	"net/http"

	"github.com/toolgate/toolgate/tool"
)

// Tools lists the tools the API's workers run that the policy does not
// deny outright (GET /v1/tools), sorted by name. It needs an agent or
// admin token.
func (c *Client) Tools(ctx context.Context) ([]tool.Descriptor, error) {
	var out struct {
		Tools []tool.Descriptor `json:"tools"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/tools", nil, &out); err != nil {
		return nil, err
	}
	if out.Tools == nil {
		out.Tools = []tool.Descriptor{}
	}
	return out.Tools, nil
}
