package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"syscall"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/workflows"
)

// apiError is an error with the HTTP status and code the API answers with.
// Its message is for a person and never carries internals.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

var errUnauthorized = &apiError{http.StatusUnauthorized, "unauthorized", "a valid bearer token is required (Authorization: Bearer <token>)"}

func badRequest(field, problem string) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request", field + " " + problem}
}

func notFound(callID string) *apiError {
	return &apiError{http.StatusNotFound, "unknown_call", "unknown call \"" + callID + "\""}
}

// mapError turns client and workflow errors into API errors; Temporal
// being unreachable, slow or over its limits into 503, 504 or 429
// (transientError); anything unexpected is logged and answered as a 500
// without details.
func (a *api) mapError(err error) error {
	var ae *apiError
	var input *tgclient.InputError
	var decided *tgclient.AlreadyDecidedError
	var refused *tgclient.RefusedError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, tgclient.ErrNotYourSession):
		return &apiError{http.StatusForbidden, "not_your_session", err.Error()}
	case errors.Is(err, tgclient.ErrReserved):
		return &apiError{http.StatusForbidden, "reserved", err.Error()}
	case errors.Is(err, tgclient.ErrCallIDTaken):
		return &apiError{http.StatusConflict, "conflict", err.Error()}
	case errors.As(err, &input):
		return badRequest(input.Field, input.Problem)
	case errors.Is(err, tgclient.ErrNoResult):
		return &apiError{http.StatusGone, "no_result", err.Error()}
	case errors.Is(err, tgclient.ErrUnknownCall):
		return &apiError{http.StatusNotFound, "unknown_call", err.Error()}
	case errors.As(err, &decided):
		return &apiError{http.StatusConflict, "already_decided", decided.Message}
	case errors.As(err, &refused):
		switch refused.Type {
		case workflows.ErrTypeAlreadyDecided, workflows.ErrTypeNotWaiting:
			return &apiError{http.StatusConflict, "not_waiting", refused.Message}
		case workflows.ErrTypeAlreadyClaimed:
			return &apiError{http.StatusConflict, "already_claimed", refused.Message}
		case workflows.ErrTypeAlreadyRecorded:
			return &apiError{http.StatusConflict, "already_recorded", refused.Message}
		case workflows.ErrTypeInvalidRecord:
			return &apiError{http.StatusBadRequest, "invalid_request", refused.Message}
		case workflows.ErrTypeApprovalVoided:
			return &apiError{http.StatusConflict, "approval_void", refused.Message}
		case workflows.ErrTypeNotAnotherApproval:
			return &apiError{http.StatusConflict, "not_another_approval", refused.Message}
		case workflows.ErrTypePasskeyRequired:
			return &apiError{http.StatusForbidden, "passkey_required", refused.Message}
		case workflows.ErrTypePasskeyRefused:
			return &apiError{http.StatusForbidden, "passkey_refused", refused.Message}
		case workflows.ErrTypeSelfApproval:
			return &apiError{http.StatusForbidden, "self_approval", refused.Message}
		case workflows.ErrTypeNotAuthorized, workflows.ErrTypeNotYourSession:
			return &apiError{http.StatusForbidden, "forbidden", refused.Message}
		case workflows.ErrTypeInvalidEdit:
			return &apiError{http.StatusBadRequest, "invalid_edit", refused.Message}
		case workflows.ErrTypeNoSticky, workflows.ErrTypeSessionEnded:
			return &apiError{http.StatusNotFound, "not_found", refused.Message}
		case workflows.ErrTypeUnavailable:
			return &apiError{http.StatusServiceUnavailable, errTemporalUnavailable.code, refused.Message}
		}
		return &apiError{http.StatusBadRequest, "invalid_decision", refused.Message}
	}
	if tgclient.IsSearchAttributeNotMapped(err) {
		// A frontend that has not yet refreshed its namespace cache after
		// the attributes were registered: it will in seconds.
		a.logger.Sugar().Warnw("API request failed: Temporal does not map toolgate's search attributes yet", "error", err)
		return errNotReady
	}
	if ae := transientError(err); ae != nil {
		a.logger.Sugar().Warnw("API request failed: Temporal", "status", ae.status, "error", err)
		return ae
	}
	a.logger.Sugar().Errorw("API request failed", "error", err)
	return &apiError{http.StatusInternalServerError, "internal", "internal error; see the server log"}
}

// The answers to Temporal being down, slow or over its limits: the
// request may well succeed later, so they are not 500s.
var (
	errTemporalUnavailable = &apiError{http.StatusServiceUnavailable, "unavailable", "Temporal is not reachable; try again shortly"}
	errTemporalTimeout     = &apiError{http.StatusGatewayTimeout, "timeout", "Temporal did not answer in time; try again"}
	errTemporalBusy        = &apiError{http.StatusTooManyRequests, "rate_limited", "Temporal is over a rate or resource limit; try again in a moment"}
)

// retryAfter is the Retry-After header (in seconds) of the answers that
// say when to try again, by error code.
var retryAfter = map[string]string{
	errTemporalUnavailable.code: "5",
	errTemporalBusy.code:        "1",
}

// transientError maps a Temporal status error (a serviceerror, a gRPC
// status, or a context deadline, wrapped or not) to 503, 504 or 429; any
// other error to nil. A refused connection to Temporal is a 503 too.
func transientError(err error) *apiError {
	switch serviceerror.ToStatus(err).Code() {
	case codes.Unavailable:
		return errTemporalUnavailable
	case codes.DeadlineExceeded:
		return errTemporalTimeout
	case codes.ResourceExhausted:
		return errTemporalBusy
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return errTemporalUnavailable
	}
	return nil
}

func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return &apiError{http.StatusInternalServerError, "internal", "internal error"}
}

func writeError(w http.ResponseWriter, err error) {
	e := asAPIError(err)
	if after, ok := retryAfter[e.code]; ok {
		w.Header().Set("Retry-After", after)
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]string{"code": e.code, "message": e.message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
