package server

import (
	"encoding/json"
	"errors"
	"net/http"

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

// mapError turns client and workflow errors into API errors; anything
// unexpected is logged and answered as a 500 without details.
func (a *api) mapError(err error) error {
	var ae *apiError
	var input *tgclient.InputError
	var decided *tgclient.AlreadyDecidedError
	var refused *tgclient.RefusedError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, tgclient.ErrCallIDTaken):
		return &apiError{http.StatusConflict, "conflict", err.Error()}
	case errors.As(err, &input):
		return badRequest(input.Field, input.Problem)
	case errors.Is(err, tgclient.ErrUnknownCall):
		return &apiError{http.StatusNotFound, "unknown_call", err.Error()}
	case errors.As(err, &decided):
		return &apiError{http.StatusConflict, "already_decided", decided.Message}
	case errors.As(err, &refused):
		switch refused.Type {
		case workflows.ErrTypeAlreadyDecided, workflows.ErrTypeNotWaiting:
			return &apiError{http.StatusConflict, "not_waiting", refused.Message}
		case workflows.ErrTypeSelfApproval:
			return &apiError{http.StatusForbidden, "self_approval", refused.Message}
		case workflows.ErrTypeNotAuthorized:
			return &apiError{http.StatusForbidden, "forbidden", refused.Message}
		case workflows.ErrTypeInvalidEdit:
			return &apiError{http.StatusBadRequest, "invalid_edit", refused.Message}
		case workflows.ErrTypeNoSticky, workflows.ErrTypeSessionEnded:
			return &apiError{http.StatusNotFound, "not_found", refused.Message}
		}
		return &apiError{http.StatusBadRequest, "invalid_decision", refused.Message}
	}
	a.logger.Sugar().Errorw("API request failed", "error", err)
	return &apiError{http.StatusInternalServerError, "internal", "internal error; see the server log"}
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
	writeJSON(w, e.status, map[string]any{"error": map[string]string{"code": e.code, "message": e.message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
