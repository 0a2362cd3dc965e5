package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// PendingList is the approvers' view at scale: the first page of the
// waiting calls (`toolgate pending`, GET /v1/pending, the inbox) with
// Waiting calls waiting, against a bare visibility listing of a page.
type PendingList struct {
	Waiting     int     `json:"waiting"`
	PageSize    int     `json:"page_size"`
	ParkSeconds float64 `json:"park_seconds"`
	// First is the first page, oldest first, for an approver of every
	// group, asked again and again as the inbox polls and as the API
	// serves it: the client remembers where the last first page was.
	First Latency `json:"first_page"`
	// FirstCold is the same page from a new client each time, which
	// remembers nothing (a CLI over Temporal): it searches for the window.
	FirstCold Latency `json:"first_page_cold"`
	// OneGroup is the first page for an approver of one group, who may
	// decide half of the calls.
	OneGroup Latency `json:"first_page_one_group"`
	// Bare is a bare visibility listing of one page of the same calls, in
	// visibility's own order (newest first), with no count: the floor.
	Bare Latency `json:"bare_list"`
}

// idleQueue is a task queue no worker polls.
const idleQueue = "toolgate-bench-idle"

// The listing case's calls, and the query of those that wait. Only the
// bench's own are listed: a cluster's calls may be encrypted with keys
// the bench does not hold.
const (
	waitingTool      = toolAsk
	waitingRequester = "bench"
)

var (
	waitingFilter = tgclient.ListFilter{Tool: waitingTool, Requester: waitingRequester}
	pendingQuery  = fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND %s = '%s' AND %s = '%s' AND %s = '%s'",
		workflows.ToolCallWorkflowType, workflows.AttrStatus.GetName(), workflows.StatusPending,
		workflows.AttrTool.GetName(), waitingTool, workflows.AttrRequester.GetName(), waitingRequester)
)

// pendingList parks Waiting calls and times the first page of the list.
//
// The calls are started as a waiting call is seen by visibility, with its
// search attributes and memo, on a task queue no worker polls: listing
// reads nothing else, and parking 10,000 real calls (policy, session,
// notices) takes over ten minutes on this machine where this takes two.
// Half are asked of group ops, half of finance; they were requested 100 ms
// apart, the oldest first.
func (b *runner) pendingList(ctx context.Context, r *Report) error {
	p := &r.Pending
	p.Waiting, p.PageSize = b.o.Waiting, tgclient.DefaultPageSize
	// The bench's calls of an earlier run may still wait (these are never
	// decided); they are counted too.
	already, err := b.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: pendingQuery})
	if err != nil {
		return err
	}
	start := time.Now()
	first := start.Add(-time.Duration(b.o.Waiting) * 100 * time.Millisecond)
	var next atomic.Int64
	if _, err := b.concurrently(ctx, b.o.Waiting, func(ctx context.Context) error {
		n := next.Add(1) - 1
		return b.startWaiting(ctx, n, first.Add(time.Duration(n)*100*time.Millisecond))
	}); err != nil {
		return err
	}
	if err := b.awaitListed(ctx, pendingQuery, already.GetCount()+int64(b.o.Waiting)); err != nil {
		return err
	}
	p.ParkSeconds = time.Since(start).Seconds()

	everyGroup := &policy.Approver{Name: "bench", Groups: []string{"*"}}
	ops := &policy.Approver{Name: "bench", Groups: []string{"ops"}}
	warm := tgclient.New(b.tc, benchQueue).WithDoor(benchDoor)
	// Each page is checked: full, counting them all, starting with the
	// oldest call.
	firstPage := func(c *tgclient.Client, decider *policy.Approver, total int64) func(context.Context) error {
		return func(ctx context.Context) error {
			f := waitingFilter
			f.DecidableBy = decider
			page, err := c.Pending(ctx, f, tgclient.PageRequest{})
			switch {
			case err != nil:
				return err
			case page.Total < total || len(page.Calls) != int(min(page.Total, int64(p.PageSize))):
				return fmt.Errorf("first page: %d calls of %d, want %d of %d", len(page.Calls), page.Total, min(total, int64(p.PageSize)), total)
			case already.GetCount() == 0 && page.Calls[0].CallID != b.waitingID(0):
				return fmt.Errorf("first page starts with %s, not the oldest call %s", page.Calls[0].CallID, b.waitingID(0))
			}
			return nil
		}
	}
	n := int64(b.o.Waiting)
	cases := []func(context.Context) error{
		firstPage(warm, everyGroup, n),
		func(ctx context.Context) error {
			return firstPage(tgclient.New(b.tc, benchQueue).WithDoor(benchDoor), everyGroup, n)(ctx)
		},
		firstPage(warm, ops, (n+1)/2),
		func(ctx context.Context) error {
			_, err := b.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: pendingQuery, PageSize: int32(p.PageSize)})
			return err
		},
	}
	samples := make([][]time.Duration, len(cases))
	for i := range max(b.o.Runs/4, 10) {
		for k := range cases {
			c := (i + k) % len(cases)
			began := time.Now()
			if err := cases[c](ctx); err != nil {
				return err
			}
			samples[c] = append(samples[c], time.Since(began))
		}
	}
	p.First, p.FirstCold, p.OneGroup, p.Bare = summarise(samples[0]), summarise(samples[1]), summarise(samples[2]), summarise(samples[3])
	return nil
}

func (b *runner) waitingID(n int64) string { return fmt.Sprintf("bench-waiting-%s-%05d", b.run, n) }

// startWaiting starts the nth waiting call of the listing case.
func (b *runner) startWaiting(ctx context.Context, n int64, requestedAt time.Time) error {
	groups := []string{"ops"}
	if n%2 == 1 {
		groups = []string{"finance"}
	}
	_, err := b.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        workflows.CallWorkflowID(b.waitingID(n)),
		TaskQueue: idleQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.AttrStatus.ValueSet(string(workflows.StatusPending)),
			workflows.AttrTool.ValueSet(waitingTool),
			workflows.AttrSession.ValueSet(b.session(fmt.Sprintf("waiting-%d", n%50))),
			workflows.AttrRequestedAt.ValueSet(requestedAt),
			workflows.AttrRequester.ValueSet(waitingRequester),
			workflows.AttrGroups.ValueSet(groups),
		),
		Memo: map[string]any{
			workflows.MemoMessage: "Allow ask_echo with arguments " + string(args) + "?", workflows.MemoArgs: string(args),
			workflows.MemoRule: "bench", workflows.MemoGroups: groups, workflows.MemoDeadline: requestedAt.Add(time.Hour),
		},
	}, workflows.ToolCallWorkflowType)
	if err != nil {
		return fmt.Errorf("park waiting call %d: %w", n, err)
	}
	return nil
}

// awaitListed waits until visibility, which is written after the start
// and each status returns, counts n workflows of query.
func (b *runner) awaitListed(ctx context.Context, query string, n int64) error {
	for {
		resp, err := b.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err != nil {
			return fmt.Errorf("count the waiting workflows: %w", err)
		}
		if resp.GetCount() >= n {
			return nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("visibility listed %d of %d waiting workflows: %w", resp.GetCount(), n, err)
		}
	}
}

func printPendingList(w io.Writer, p PendingList, ratio float64) {
	fmt.Fprintf(w, "pending list, %d waiting (parked in %.0fs): first page of %d p50 %.1f ms p95 %.1f ms (new client: %.1f ms, one group: %.1f ms); bare visibility list of a page: %.1f ms (ratio %.2f)\n",
		p.Waiting, p.ParkSeconds, p.PageSize, p.First.P50, p.First.P95, p.FirstCold.P50, p.OneGroup.P50, p.Bare.P50, ratio)
}
