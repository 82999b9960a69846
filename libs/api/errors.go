package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Error codes of FieldError.
const (
	CodeRequired    = "Required"
	CodeInvalid     = "Invalid"
	CodeUnsupported = "Unsupported"
	CodeForbidden   = "Forbidden"
	CodeTooLarge    = "TooLarge"
	CodeUnknown     = "UnknownField"
	CodeType        = "WrongType"
	CodeDuplicate   = "Duplicate"
)

// FieldError is one problem of a document: where, what kind, and why.
type FieldError struct {
	// Field is the JSON path of the field (spec.template.containers[0].image).
	Field string `json:"field"`
	// Code classifies the problem (Required, Invalid, Forbidden, ...).
	Code string `json:"code"`
	// Reason says what is wrong, for a human.
	Reason string `json:"reason"`
}

// FieldErrors is every problem found in a document.
type FieldErrors []FieldError

func (fe FieldErrors) Error() string {
	parts := make([]string, len(fe))
	for i, e := range fe {
		parts[i] = fmt.Sprintf("%s: %s", e.Field, e.Reason)
	}
	return "invalid workload: " + strings.Join(parts, "; ")
}

// add appends an error.
func (fe *FieldErrors) add(field, code, format string, args ...any) {
	*fe = append(*fe, FieldError{Field: field, Code: code, Reason: fmt.Sprintf(format, args...)})
}

func prefixDecodeError(prefix string, err error) error {
	fe := asFieldErrors(err)
	var out FieldErrors
	if errors.As(fe, &out) {
		for i := range out {
			if out[i].Field == "" {
				out[i].Field = prefix
			} else {
				out[i].Field = prefix + "." + out[i].Field
			}
		}
		return out
	}
	return fe
}

// asFieldErrors turns encoding/json errors into FieldErrors.
func asFieldErrors(err error) error {
	var fe FieldErrors
	if errors.As(err, &fe) {
		return fe
	}
	var pfe *FieldErrors
	if errors.As(err, &pfe) {
		return *pfe
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return FieldErrors{{Field: jsonPath(te.Field), Code: CodeType, Reason: fmt.Sprintf("got %s, want %s", te.Value, te.Type.String())}}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return FieldErrors{{Field: "", Code: CodeInvalid, Reason: fmt.Sprintf("malformed JSON at offset %d: %v", se.Offset, se)}}
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return FieldErrors{{Field: strings.Trim(f, `"`), Code: CodeUnknown, Reason: "unknown field"}}
	}
	return FieldErrors{{Code: CodeInvalid, Reason: msg}}
}

// jsonPath drops the names of embedded Go structs from a decoder's field
// path: the model's JSON names are lower camel case, Go type names are not.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && p[0] >= 'A' && p[0] <= 'Z' {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}
