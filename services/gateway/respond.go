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

// writeFieldError answers 400 naming the field.
func writeFieldError(w http.ResponseWriter, r *http.Request, field, code, reason string) {
	writeErrorBody(w, r, http.StatusBadRequest, computeapi.Error{Code: "Invalid", Message: field + ": " + reason,
		Fields: []computeapi.FieldError{{Field: field, Code: code, Reason: reason}}})
}

// paramError answers a request whose path or query parameters do not parse.
func (s *Service) paramError(w http.ResponseWriter, r *http.Request, err error) {
	writeErrorBody(w, r, http.StatusBadRequest, computeapi.Error{Code: "Invalid", Message: err.Error()})
}

// writeRemoteError answers with what a region service said, 500 when its
// reply was not what its endpoint promises, or 503 when it could not be
// reached.
func writeRemoteError(w http.ResponseWriter, r *http.Request, err error) {
	var re *bus.RemoteError
	if errors.Is(err, bus.ErrBadReply) {
		writeError(w, r, http.StatusInternalServerError, "Internal", "a region service replied with an undecodable answer: "+err.Error())
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
	writeError(w, r, http.StatusServiceUnavailable, "Unavailable", "the region did not answer: "+err.Error())
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
