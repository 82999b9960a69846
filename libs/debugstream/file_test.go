package debugstream

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestCheckLogFile(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"/var/log/app.log", true},
		{"/tmp/x", true},
		{"/srv/procfs.log", true},
		{"", false},
		{"var/log/app.log", false},
		{"/var/log/../../etc/shadow", false},
		{"/var//log", false},
		{"/var/log/", false},
		{"/", false},
		{"/proc/self/environ", false},
		{"/proc", false},
		{"/sys/kernel", false},
		{"/dev/mem", false},
		{"/var/run/secrets/kubernetes.io/serviceaccount/token", false},
		{"/run/secrets/db", false},
		{"/var/log/a\nb", false},
		{"/" + strings.Repeat("a", MaxLogFilePath), false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			err := CheckLogFile(tt.path)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckLogFile(%q) = %v, want ok %v", tt.path, err, tt.ok)
			}
			var e *Error
			if err != nil && (!errors.As(err, &e) || e.Code != http.StatusBadRequest) {
				t.Errorf("refusal %v is not a 400 *Error", err)
			}
		})
	}
}
