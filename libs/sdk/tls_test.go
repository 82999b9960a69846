package sdk_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"atoll.dev/libs/sdk"
)

// A gateway whose certificate a private CA signed is trusted with that CA
// given, and refused without it: no option skips verification.
func TestWithRootCAsTrustsOnlyTheGivenCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"subject":"alice"}`))
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())

	trusted, err := sdk.New(srv.URL, sdk.WithRootCAs(pool), sdk.WithRetry(1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	id, err := trusted.WhoAmI(context.Background())
	if err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	if id.Subject != "alice" {
		t.Errorf("subject %q, want alice", id.Subject)
	}

	untrusted, err := sdk.New(srv.URL, sdk.WithRetry(1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = untrusted.WhoAmI(context.Background())
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("without the CA: err %v, want an unknown authority", err)
	}

	if _, err := sdk.New(srv.URL, sdk.WithRootCAs(pool), sdk.WithHTTPClient(srv.Client())); err == nil {
		t.Error("WithRootCAs with WithHTTPClient accepted")
	}
}
