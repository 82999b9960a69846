package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/daemon"
	"atoll.dev/services/gateway"
)

// The test binary is also the gateway: with ATOLL_TEST_GATEWAY_MAIN set it
// runs main with the arguments after "--", so a test can watch the real
// process refuse to start.
func TestMain(m *testing.M) {
	if os.Getenv("ATOLL_TEST_GATEWAY_MAIN") == "1" {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		os.Args = append([]string{"gateway"}, args...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runGateway(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	// No ATOLL_GATEWAY_* from the caller's environment; a NATS nobody
	// listens on, so a gateway that got as far as connecting would hang
	// until the deadline instead of exiting.
	cmd.Env = append([]string{"ATOLL_TEST_GATEWAY_MAIN=1", "ATOLL_NATS_URL=nats://127.0.0.1:1", "ATOLL_ADMIN_LISTEN=", "PATH=" + os.Getenv("PATH")}, env...)
	var stderr bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("gateway %v did not exit within 30s; output:\n%s", args, stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// A gateway with no token source refuses to start, before it connects to
// anything, with a message naming both ways to give one.
func TestGatewayWithoutTokenSourceRefusesToStart(t *testing.T) {
	code, out := runGateway(t, nil)
	if code != 2 {
		t.Errorf("exit code %d, want 2; output:\n%s", code, out)
	}
	for _, want := range []string{"no token source", "--tokens (ATOLL_GATEWAY_TOKENS)", "--jwks (ATOLL_GATEWAY_JWKS)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "nats") {
		t.Errorf("the refused gateway tried NATS:\n%s", out)
	}
}

// -h names every setting's flag and environment variable.
func TestGatewayHelpNamesEveryVariable(t *testing.T) {
	code, out := runGateway(t, nil, "-h")
	if code != 0 {
		t.Errorf("-h exit code %d, want 0", code)
	}
	for _, v := range []string{"-listen", "ATOLL_GATEWAY_LISTEN", "-tokens", "ATOLL_GATEWAY_TOKENS", "-jwks", "ATOLL_GATEWAY_JWKS",
		"-jwt-issuer", "ATOLL_GATEWAY_JWT_ISSUER", "-jwt-audience", "ATOLL_GATEWAY_JWT_AUDIENCE", "-rate", "ATOLL_GATEWAY_RATE",
		"-burst", "ATOLL_GATEWAY_BURST", "-tls-cert", "ATOLL_GATEWAY_TLS_CERT", "-tls-key", "ATOLL_GATEWAY_TLS_KEY",
		"-insecure-plain-http", "ATOLL_GATEWAY_INSECURE_PLAIN_HTTP", "-trusted-proxies", "ATOLL_GATEWAY_TRUSTED_PROXIES", "-jwt-max-lifetime", "ATOLL_GATEWAY_JWT_MAX_LIFETIME", "ATOLL_NATS_URL", "ATOLL_NATS_CREDS", "ATOLL_NATS_REPLICAS", "ATOLL_ADMIN_LISTEN", "ATOLL_LOG_LEVEL"} {
		if !strings.Contains(out, v) {
			t.Errorf("-h does not name %s:\n%s", v, out)
		}
	}
}

// The environment a container sets reaches the gateway's Config.
func TestGatewayConfigFromEnvironment(t *testing.T) {
	env := map[string]string{
		"ATOLL_GATEWAY_LISTEN": ":8080", "ATOLL_GATEWAY_TOKENS": "/etc/atoll/tokens.yaml", "ATOLL_GATEWAY_JWKS": "/etc/atoll/jwks.json",
		"ATOLL_GATEWAY_JWT_ISSUER": "https://idp", "ATOLL_GATEWAY_JWT_AUDIENCE": "atoll", "ATOLL_GATEWAY_RATE": "7.5", "ATOLL_GATEWAY_BURST": "15",
		"ATOLL_GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8,192.168.1.1", "ATOLL_GATEWAY_JWT_MAX_LIFETIME": "1h",
		"ATOLL_GATEWAY_TLS_CERT": "/etc/atoll/tls/tls.crt", "ATOLL_GATEWAY_TLS_KEY": "/etc/atoll/tls/tls.key",
	}
	cfg := &gateway.Config{}
	if _, err := daemon.Parse(command(cfg, new(bool)), nil, func(k string) string { return env[k] }, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != ":8080" || cfg.Auth.TokensFile != "/etc/atoll/tokens.yaml" || cfg.Auth.JWKSFile != "/etc/atoll/jwks.json" ||
		cfg.Auth.Issuer != "https://idp" || cfg.Auth.Audience != "atoll" || cfg.RatePerSecond != 7.5 || cfg.Burst != 15 ||
		strings.Join(cfg.TrustedProxies, " ") != "10.0.0.0/8 192.168.1.1" || cfg.Auth.MaxJWTLifetime != time.Hour ||
		cfg.TLS.CertFile != "/etc/atoll/tls/tls.crt" || cfg.TLS.KeyFile != "/etc/atoll/tls/tls.key" {
		t.Errorf("config %+v", cfg)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // "" for valid
	}{
		{"no token source", nil, "no token source"},
		{"tokens", []string{"-tokens", "t.yaml", "-insecure-plain-http"}, ""},
		{"jwks with issuer and audience", []string{"-jwks", "k.json", "-jwt-issuer", "i", "-jwt-audience", "a", "-insecure-plain-http"}, ""},
		{"jwks without audience", []string{"-jwks", "k.json", "-jwt-issuer", "i"}, "--jwt-audience"},
		{"zero rate", []string{"-tokens", "t.yaml", "-rate", "0", "-insecure-plain-http"}, "must be positive"},
		{"negative burst", []string{"-tokens", "t.yaml", "-burst", "-1", "-insecure-plain-http"}, "must be positive"},
		{"certificate and key", []string{"-tokens", "t.yaml", "-tls-cert", "c.pem", "-tls-key", "k.pem"}, ""},
		{"neither certificate nor plain http", []string{"-tokens", "t.yaml"}, "no certificate"},
		{"certificate without key", []string{"-tokens", "t.yaml", "-tls-cert", "c.pem"}, "go together"},
		{"certificate and plain http", []string{"-tokens", "t.yaml", "-tls-cert", "c.pem", "-tls-key", "k.pem", "-insecure-plain-http"}, "one or the other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := daemon.Parse(command(&gateway.Config{}, new(bool)), tt.args, func(string) string { return "" }, &bytes.Buffer{})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
}
