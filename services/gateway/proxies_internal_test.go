package gateway

import (
	"net/http/httptest"
	"testing"
)

// The failed-login limiter keys on the client's address: X-Forwarded-For
// is believed only from a trusted proxy, and only its hops that proxies
// added (the last untrusted one is the client).
func TestClientHost(t *testing.T) {
	proxies, err := parseProxies([]string{"10.0.0.0/8", " 192.168.1.1", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{proxies: proxies}
	tests := []struct {
		name   string
		remote string
		xff    []string
		want   string
	}{
		{"no proxy", "203.0.113.7:5000", nil, "203.0.113.7"},
		{"an untrusted peer's header is ignored", "203.0.113.7:5000", []string{"198.51.100.1"}, "203.0.113.7"},
		{"a trusted proxy names the client", "10.1.2.3:443", []string{"198.51.100.1"}, "198.51.100.1"},
		{"a bare trusted address", "192.168.1.1:443", []string{"198.51.100.1"}, "198.51.100.1"},
		{"a client's own hops prove nothing", "10.1.2.3:443", []string{"1.1.1.1, 198.51.100.1"}, "198.51.100.1"},
		{"proxies in a chain are skipped", "10.1.2.3:443", []string{"198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"headers are joined in order", "10.1.2.3:443", []string{"1.1.1.1", "198.51.100.1"}, "198.51.100.1"},
		{"all hops trusted: the first proxy", "10.1.2.3:443", []string{"10.5.5.5"}, "10.5.5.5"},
		{"a trusted peer without the header", "10.1.2.3:443", nil, "10.1.2.3"},
		{"garbage from a trusted proxy", "10.1.2.3:443", []string{"not-an-ip"}, "10.1.2.3"},
		{"IPv6 proxy", "[fd00::1]:443", []string{"2001:db8::5"}, "2001:db8::5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/whoami", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := s.clientHost(r); got != tc.want {
				t.Fatalf("clientHost = %q, want %q", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com"} {
		if _, err := parseProxies([]string{bad}); err == nil {
			t.Errorf("trusted proxy %q accepted", bad)
		}
	}
}
