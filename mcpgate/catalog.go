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
	names map[string]bool
	at    time.Time
}

// remember records a listing.
func (c *catalog) remember(ds []tool.Descriptor) {
	names := make(map[string]bool, len(ds))
	for _, d := range ds {
		names[d.Name] = true
	}
	c.mu.Lock()
	c.names, c.at = names, time.Now()
	c.mu.Unlock()
}

// tools lists toolgate's tools and remembers them.
func (c *catalog) tools(ctx context.Context) ([]tool.Descriptor, error) {
	ds, err := c.list(ctx)
	if err == nil {
		c.remember(ds)
	}
	return ds, err
}

// has reports whether toolgate lists a tool of that name: from the last
// listing while it is fresh, else (or when it lacks the tool and is older
// than catalogRetry) from a new one.
func (c *catalog) has(ctx context.Context, name string) (bool, error) {
	c.mu.Lock()
	known, age := c.names[name], time.Since(c.at)
	c.mu.Unlock()
	if c.names != nil && (known && age < catalogFresh || !known && age < catalogRetry) {
		return known, nil
	}
	ds, err := c.tools(ctx)
	if err != nil {
		return false, err
	}
	for _, d := range ds {
		if d.Name == name {
			return true, nil
		}
	}
	return false, nil
}
