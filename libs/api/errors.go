package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
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
		return FieldErrors{{Field: jsonPath(te.Field), Code: CodeType, Reason: fmt.Sprintf("got %s, want %s", article(te.Value), jsonKind(te.Type))}}
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

// DescribeJSONError says what encoding/json found wrong without its Go
// type names.
func DescribeJSONError(err error, v any) string {
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
	)
	switch {
	case errors.Is(err, io.EOF):
		return "empty body, want " + jsonKind(reflect.TypeOf(v))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at offset %d: %s", se.Offset, se.Error())
	case errors.As(err, &te):
		if field := jsonPath(te.Field); field != "" {
			return fmt.Sprintf("field %s: got %s, want %s", field, article(te.Value), jsonKind(te.Type))
		}
		return fmt.Sprintf("got %s, want %s", article(te.Value), jsonKind(te.Type))
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind names the JSON a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a string (base64)"
		}
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another JSON value"
}

// article puts "a" or "an" before a JSON value kind as encoding/json names
// it ("array", "string", "number 1.5").
func article(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}
