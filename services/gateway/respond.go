// The gateway's responses: every JSON body and every error it writes
// goes through these, so that an error always carries the request's ID
// and a region service's refusal reaches the caller as the contract's
// Error.

package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5/middleware"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/debugstream"
)

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeRawJSON answers status with b, JSON already.
func writeRawJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b) //nolint:gosec // G705: served as application/json, never as HTML
}

// writeError answers status with the contract's Error: code and message.
func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	writeErrorBody(w, r, status, computeapi.Error{Code: code, Message: msg})
}

// writeErrorBody answers status with e, stamped with the request's ID.
func writeErrorBody(w http.ResponseWriter, r *http.Request, status int, e computeapi.Error) {
	e.RequestId = middleware.GetReqID(r.Context())
	writeJSON(w, status, e)
}

// failureKey holds a request's *failure in its context (accessLog).
const failureKey ctxKey = 2

// failure holds the detail of an error a response left out, for the log.
type failure struct{ err error }

// writeFailure answers status with code and msg, which is safe to show;
// err, which may name NATS or Go internals, goes only to the access log
// with the request's ID.
func writeFailure(w http.ResponseWriter, r *http.Request, status int, code, msg string, err error) {
	if f, ok := r.Context().Value(failureKey).(*failure); ok {
		f.err = err
	}
	writeError(w, r, status, code, msg)
}

// securityHeaders keeps browsers from sniffing a response into another
// type, and caches from storing API answers (they carry tenants' data).
func securityHeaders(noStore bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Content-Type-Options", "nosniff")
			if noStore {
				w.Header().Set("Cache-Control", "no-store")
			}
			next.ServeHTTP(w, r)
		})
	}
}

// writeFieldError answers 400 naming the field.
func writeFieldError(w http.ResponseWriter, r *http.Request, field, code, reason string) {
	writeErrorBody(w, r, http.StatusBadRequest, computeapi.Error{Code: "Invalid", Message: field + ": " + reason,
		Fields: []computeapi.FieldError{{Field: field, Code: code, Reason: reason}}})
}

// paramError answers a request whose path or query parameters do not parse.
func (s *Service) paramError(w http.ResponseWriter, r *http.Request, err error) {
	writeErrorBody(w, r, http.StatusBadRequest, computeapi.Error{Code: "Invalid", Message: paramMessage(err)})
}

// paramMessage says which parameter is wrong, without the parser's
// internals (strconv's, encoding/json's).
func paramMessage(err error) string {
	var (
		format   *computeapi.InvalidParamFormatError
		required *computeapi.RequiredParamError
		header   *computeapi.RequiredHeaderError
		many     *computeapi.TooManyValuesForParamError
		unescape *computeapi.UnescapedCookieParamError
		unmarsh  *computeapi.UnmarshalingParamError
	)
	switch {
	case errors.As(err, &format):
		return "parameter " + format.ParamName + ": invalid value"
	case errors.As(err, &required):
		return "parameter " + required.ParamName + " is required"
	case errors.As(err, &header):
		return "header " + header.ParamName + " is required"
	case errors.As(err, &many):
		return "parameter " + many.ParamName + ": one value expected"
	case errors.As(err, &unescape):
		return "cookie " + unescape.ParamName + ": invalid value"
	case errors.As(err, &unmarsh):
		return "parameter " + unmarsh.ParamName + ": invalid value"
	}
	return "invalid parameters"
}

// writeRemoteError answers with what a region service said, 500 when its
// reply was not what its endpoint promises, or 503 when it could not be
// reached.
func writeRemoteError(w http.ResponseWriter, r *http.Request, err error) {
	var re *bus.RemoteError
	if errors.Is(err, bus.ErrBadReply) {
		writeFailure(w, r, http.StatusInternalServerError, "Internal", "a region service gave an answer the gateway could not read", err)
		return
	}
	if errors.As(err, &re) {
		var eb api.ErrorBody
		if json.Unmarshal(re.Body, &eb) != nil || eb.Code == "" {
			eb = api.ErrorBody{Code: http.StatusText(re.Code), Message: re.Description}
		}
		writeErrorBody(w, r, re.Code, apiError(eb))
		return
	}
	w.Header().Set("Retry-After", "1")
	writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region did not answer; retry", err)
}

func apiError(eb api.ErrorBody) computeapi.Error {
	e := computeapi.Error{Code: eb.Code, Message: eb.Message}
	for _, f := range eb.Fields {
		e.Fields = append(e.Fields, computeapi.FieldError{Field: f.Field, Code: f.Code, Reason: f.Reason})
	}
	if q := eb.Quota; q != nil {
		e.Quota = &computeapi.QuotaRejection{Project: q.Project, Tier: string(q.Tier), Resource: q.Resource, Limit: q.Limit, Used: q.Used, Requested: q.Requested}
	}
	return e
}

// writeDebugError answers a refusal of the cluster-facing side.
func writeDebugError(w http.ResponseWriter, r *http.Request, err error) {
	var de *debugstream.Error
	if errors.As(err, &de) {
		code := map[int]string{400: "Invalid", 403: "Forbidden", 404: "NotFound", 422: "Invalid", 503: "Unavailable"}[de.Code]
		if code == "" {
			code = http.StatusText(de.Code)
		}
		writeError(w, r, de.Code, code, de.Message)
		return
	}
	writeRemoteError(w, r, err)
}
