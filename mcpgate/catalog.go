package mcpgate

import (
	"context"
	"sync"
	"time"

	"github.com/toolgate/toolgate/tool"
)

// catalogFresh is how long a listing of toolgate's tools answers "is this
// tool known"; catalogRetry is how soon after a listing a call of a tool
// it did not have lists again (an upstream that just came up).
const (
	catalogFresh = 30 * time.Second
	catalogRetry = 2 * time.Second
)

// catalog remembers the last listing of toolgate's tools, so a tools/call
// of a tool the server does not have is refused without a toolgate call,
// and without listing (a workflow) on every call.
type catalog struct {
	list func(context.Context) ([]tool.Descriptor, error)

	mu    sync.Mutex
	tools map[string]tool.Descriptor
	at    time.Time
}

// remember records a listing.
func (c *catalog) remember(ds []tool.Descriptor) {
	tools := make(map[string]tool.Descriptor, len(ds))
	for _, d := range ds {
		tools[d.Name] = d
	}
	c.mu.Lock()
	c.tools, c.at = tools, time.Now()
	c.mu.Unlock()
}

// listed lists toolgate's tools and remembers them.
func (c *catalog) listed(ctx context.Context) ([]tool.Descriptor, error) {
	ds, err := c.list(ctx)
	if err == nil {
		c.remember(ds)
	}
	return ds, err
}

// lookup finds the tool toolgate lists under name: in the last listing
// while it is fresh, else (or when it lacks the tool and is older than
// catalogRetry) in a new one.
func (c *catalog) lookup(ctx context.Context, name string) (tool.Descriptor, bool, error) {
	c.mu.Lock()
	d, known := c.tools[name]
	listed, age := c.tools != nil, time.Since(c.at)
	c.mu.Unlock()
	if listed && (known && age < catalogFresh || !known && age < catalogRetry) {
		return d, known, nil
	}
	ds, err := c.listed(ctx)
	if err != nil {
		return tool.Descriptor{}, false, err
	}
	for _, d := range ds {
		if d.Name == name {
			return d, true, nil
		}
	}
	return tool.Descriptor{}, false, nil
}
