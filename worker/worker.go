// Package worker wires toolgate into a Temporal worker: both workflows and
// every activity, registered in one place.
package worker

import (
	"errors"
	"slices"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// Options configure a toolgate worker.
type Options struct {
	// TaskQueue defaults to workflows.TaskQueue.
	TaskQueue string
	// Policy judges every call. Required.
	Policy policy.ToolPolicy
	// Tools are the tools the worker can run. Required.
	Tools *tool.Registry
	// Handler decides deferred calls by code before a person is asked.
	// Optional.
	Handler policy.ApprovalHandler
	// Hooks observe executed tools. Optional.
	Hooks []policy.LifecycleHook
	// Middleware transforms tool outputs, in order. Optional.
	Middleware []policy.OutputMiddleware
	// Channels tell approvers a call waits (Slack, email, webhooks), and
	// what became of it. Optional.
	Channels []activities.Channel
	// MaxOutputBytes caps tool outputs; zero means 1 MiB.
	MaxOutputBytes int
	// Ledger keeps every call's submission, decision and outcome
	// (a *ledger.Ledger). Optional: without it nothing is logged outside
	// Temporal.
	Ledger activities.Ledger
	// DataConverter is the one c was dialled with (keyring.DataConverter
	// when payloads are encrypted): the activities decode the memos they
	// read with it. Nil: the SDK's default.
	DataConverter converter.DataConverter
	// Doors are the public keys of the doors (serve, dev, a CLI with a
	// door key) whose statements make a message a person's: the workflows
	// refuse every decision, submission, cancel, claim, revoke and end
	// without a valid one. Nil trusts none. A worker holds no door key:
	// tools run on workers.
	Doors *statement.Doors
	// Passkeys and RelyingParty check the passkey assertions of the rules
	// that need them (activities.VerifyPasskey); nil: their approvals are
	// refused.
	Passkeys     activities.Passkeys
	RelyingParty passkey.RelyingParty
	// Tracing emits each call's spans when it ends (package calltrace);
	// nil: no spans. The caller's trace reaches a call through the SDK's
	// tracing interceptor on the client c was dialled with.
	Tracing *activities.Tracing
	// Worker passes options through to the Temporal worker (pollers,
	// concurrency, cache). Zero values are the SDK's defaults.
	Worker sdkworker.Options
}

// New returns a worker, not yet started, for toolgate's workflows and
// activities on the task queue.
func New(c client.Client, o Options) (sdkworker.Worker, error) {
	if o.Policy == nil || o.Tools == nil {
		return nil, errors.New("toolgate worker: Policy and Tools are required")
	}
	if o.TaskQueue == "" {
		o.TaskQueue = workflows.TaskQueue
	}
	wo := o.Worker
	wo.Interceptors = append(slices.Clone(wo.Interceptors), workflows.DoorsInterceptor(o.Doors))
	if o.Tracing != nil {
		wo.Interceptors = append(wo.Interceptors, workflows.CallerTraceInterceptor())
	}
	w := sdkworker.New(c, o.TaskQueue, wo)
	w.RegisterWorkflowWithOptions(workflows.ToolCallWorkflow, workflow.RegisterOptions{Name: workflows.ToolCallWorkflowType})
	w.RegisterWorkflowWithOptions(workflows.ToolgateSession, workflow.RegisterOptions{Name: workflows.SessionWorkflowType})
	w.RegisterWorkflowWithOptions(workflows.WaitingRoom, workflow.RegisterOptions{Name: workflows.RoomWorkflowType})
	w.RegisterWorkflowWithOptions(workflows.NoticesWorkflow, workflow.RegisterOptions{Name: workflows.NoticesWorkflowType})
	w.RegisterWorkflowWithOptions(workflows.ToolCatalogWorkflow, workflow.RegisterOptions{Name: workflows.ToolCatalogWorkflowType})
	w.RegisterWorkflowWithOptions(workflows.ToolPins, workflow.RegisterOptions{Name: workflows.PinsWorkflowType})
	w.RegisterWorkflowWithOptions(workflows.RanAfterEndWorkflow, workflow.RegisterOptions{Name: workflows.RanAfterEndWorkflowType})
	acts := &activities.Activities{
		Policy:         o.Policy,
		Tools:          o.Tools,
		Handler:        o.Handler,
		Hooks:          o.Hooks,
		Middleware:     o.Middleware,
		Channels:       o.Channels,
		Client:         c,
		MaxOutputBytes: o.MaxOutputBytes,
		Ledger:         o.Ledger,
		DataConverter:  o.DataConverter,
		Doors:          o.Doors,
		Passkeys:       o.Passkeys,
		RelyingParty:   o.RelyingParty,
		Tracing:        o.Tracing,
	}
	w.RegisterActivity(acts)
	return drainingWorker{Worker: w, acts: acts}, nil
}

// drainingWorker is the SDK's worker that, once stopped, also waits for
// the room leaves its tool activities sent without holding their results
// (activities.Drain): a stopping worker loses none.
type drainingWorker struct {
	sdkworker.Worker
	acts *activities.Activities
}

func (w drainingWorker) Stop() {
	w.Worker.Stop()
	activities.Drain(w.acts)
}

func (w drainingWorker) Run(interruptCh <-chan any) error {
	err := w.Worker.Run(interruptCh)
	activities.Drain(w.acts)
	return err
}
