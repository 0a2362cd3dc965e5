package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tgclient "github.com/toolgate/toolgate/client"
)

// TestTemporalTroubleIsNotAnInternalError: Temporal being down, slow or
// over its limits is a 503, 504 or 429 that says so and when to try
// again, never a 500, however the error is wrapped.
func TestTemporalTroubleIsNotAnInternalError(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{"serviceerror.Unavailable", serviceerror.NewUnavailable("connection error"), http.StatusServiceUnavailable, "unavailable", "5"},
		{"wrapped Unavailable", fmt.Errorf("query call c1: %w", serviceerror.NewUnavailable("x")), http.StatusServiceUnavailable, "unavailable", "5"},
		{"gRPC Unavailable", status.Error(codes.Unavailable, "transport is closing"), http.StatusServiceUnavailable, "unavailable", "5"},
		{"connection refused", fmt.Errorf("start call c1: %w", refused), http.StatusServiceUnavailable, "unavailable", "5"},
		{"context deadline", fmt.Errorf("decide c1: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, "timeout", ""},
		{"serviceerror.DeadlineExceeded", serviceerror.NewDeadlineExceeded("deadline exceeded"), http.StatusGatewayTimeout, "timeout", ""},
		{"gRPC DeadlineExceeded", status.Error(codes.DeadlineExceeded, "x"), http.StatusGatewayTimeout, "timeout", ""},
		{"serviceerror.ResourceExhausted", serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, "namespace rate limit exceeded"), http.StatusTooManyRequests, "rate_limited", "1"},
		{"busy workflow", fmt.Errorf("decide c1: %w", serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW, "too many updates")), http.StatusTooManyRequests, "rate_limited", "1"},
	}
	a := &api{logger: zap.NewNop()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeError(rec, a.mapError(tt.err))
			assert.Equal(t, tt.status, rec.Code)
			code, msg := apiErrorOf(t, rec)
			assert.Equal(t, tt.code, code)
			assert.Contains(t, msg, "Temporal")
			assert.NotContains(t, msg, "internal")
			assert.Equal(t, tt.retryAfter, rec.Header().Get("Retry-After"))
		})
	}

	for _, err := range []error{errors.New("boom"), serviceerror.NewInternal("x"), context.Canceled} {
		rec := httptest.NewRecorder()
		writeError(rec, a.mapError(err))
		assert.Equal(t, http.StatusInternalServerError, rec.Code, "%v", err)
		assert.Empty(t, rec.Header().Get("Retry-After"))
	}
}

// unavailableTemporal is a Temporal frontend that cannot be reached.
type unavailableTemporal struct {
	client.Client // nil: methods not written here panic
}

func (unavailableTemporal) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, serviceerror.NewUnavailable(`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:7233: connect: connection refused"`)
}

func TestAPIAnswers503WhenTemporalIsDown(t *testing.T) {
	h := New(Config{Calls: tgclient.New(unavailableTemporal{}, "").WithDoor(testDoor), Tokens: mustTokens(t)})
	rec := apiCall(h, "agent-token", "GET", "/v1/calls/c1", "")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Equal(t, "5", rec.Header().Get("Retry-After"))
	code, msg := apiErrorOf(t, rec)
	assert.Equal(t, "unavailable", code)
	assert.Equal(t, "Temporal is not reachable; try again shortly", msg)
	assert.NotContains(t, rec.Body.String(), "127.0.0.1", "no internals")
}

// A frontend that does not map toolgate's search attributes yet (they
// were registered seconds ago) refuses a start with InvalidArgument; the
// API says to try again shortly instead of answering 500.
func TestUnmappedSearchAttributeIsRetryable(t *testing.T) {
	a := &api{logger: zap.NewNop()}
	err := fmt.Errorf("start call c1: %w", serviceerror.NewInvalidArgument("Namespace default has no mapping defined for search attribute ToolgateTool"))
	rec := httptest.NewRecorder()
	writeError(rec, a.mapError(err))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "5", rec.Header().Get("Retry-After"))
	code, msg := apiErrorOf(t, rec)
	assert.Equal(t, "unavailable", code)
	assert.Contains(t, msg, "search attributes are not usable yet")

	rec = httptest.NewRecorder()
	writeError(rec, a.mapError(serviceerror.NewInvalidArgument("some other bad argument")))
	assert.Equal(t, http.StatusInternalServerError, rec.Code, "only the unmapped attribute is retryable")
}
