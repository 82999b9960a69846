package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestRefusalReadsTheMessageAndPutsTheBodyBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"ok", http.StatusOK, `{"items":[]}`, ""},
		{"refused", http.StatusServiceUnavailable, `{"code":"Unavailable","message":"the workload's events cannot all be read yet; retry after 1s","requestId":"r1"}`,
			": Unavailable: the workload's events cannot all be read yet; retry after 1s (request r1)"},
		{"not json", http.StatusBadGateway, "bad gateway", `: "bad gateway"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.status, Body: io.NopCloser(strings.NewReader(tc.body))}
			if got := refusal(resp); got != tc.want {
				t.Errorf("refusal = %q, want %q", got, tc.want)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != tc.body {
				t.Errorf("body after refusal = %q, %v; want %q", b, err, tc.body)
			}
		})
	}
}
