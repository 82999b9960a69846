package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"atoll.dev/libs/computeapi"
)

// Error is a non-2xx answer of the gateway: its HTTP status and the
// contract's error body (a code, a message, every field problem, the
// broken quota).
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Body is the decoded error; for a body that is not the contract's
	// error document, Code is the status text and Message the body's text.
	Body computeapi.Error
}

// Error returns the status, code and message, and every field problem
// (the broken quota, if any, is in Body.Quota).
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s: %s", e.Status, e.Body.Code, e.Body.Message)
	for i, f := range e.Body.Fields {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s: %s (%s)", sep, f.Field, f.Reason, f.Code)
	}
	return b.String()
}

// Code is the error's machine-readable code (Invalid, Forbidden, NotFound, ...).
func (e *Error) Code() string { return e.Body.Code }

// IsNotFound says whether err is the gateway's 404.
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsForbidden says whether err is the gateway's 403.
func IsForbidden(err error) bool { return hasStatus(err, http.StatusForbidden) }

// IsConflict says whether err is the gateway's 409.
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

func hasStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// newError builds the Error of a non-2xx answer.
func newError(status int, body []byte) *Error {
	e := &Error{Status: status}
	if json.Unmarshal(body, &e.Body) == nil && e.Body.Code != "" {
		return e
	}
	e.Body = computeapi.Error{Code: strings.ReplaceAll(http.StatusText(status), " ", ""), Message: strings.TrimSpace(string(body))}
	if e.Body.Message == "" {
		e.Body.Message = http.StatusText(status)
	}
	return e
}

// errorFromResponse reads (a bounded part of) resp's body into an Error
// and closes it.
func errorFromResponse(resp *http.Response) *Error {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return newError(resp.StatusCode, body)
}

// generated is what every generated response offers.
type generated interface {
	StatusCode() int
	GetBody() []byte
}

// decode turns a generated response into its 2xx document, or an error.
func decode[T any](op string, r generated, err error) (*T, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if s := r.StatusCode(); s < 200 || s > 299 {
		return nil, newError(s, r.GetBody())
	}
	var v T
	if err := json.Unmarshal(r.GetBody(), &v); err != nil {
		return nil, fmt.Errorf("%s: decode answer: %w", op, err)
	}
	return &v, nil
}

// noContent checks a generated response that carries no document.
func noContent(op string, r generated, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if s := r.StatusCode(); s < 200 || s > 299 {
		return newError(s, r.GetBody())
	}
	return nil
}
