// Command gateway runs the Compute API: REST under /v1 (the contract is
// served at /openapi.yaml, rendered at /docs), the web console at
// /console/, authentication, authorization, rate limits and audit.
//
// Every setting is a flag and an environment variable (`gateway -h`).
// Credentials: --tokens names a YAML file of API tokens, kept as SHA-256
// digests ({tokens: [{subject, sha256, platformAdmin, roles: {project:
// viewer|developer|admin}, expires: RFC 3339}]}), read again within
// seconds of a change; --jwks names a JSON Web Key Set whose keys verify
// JWTs (claims sub, exp, atoll.dev/roles, atoll.dev/platform-admin), whose
// iss and aud must equal --jwt-issuer and --jwt-audience (both required
// with a JWKS) and whose lifetime is at most --jwt-max-lifetime. A gateway
// with neither refuses to start: it could only answer 401.
// --trusted-proxies lists the load balancers whose X-Forwarded-For is
// believed. Tokens and JWTs may name the caller's groups (the tokens
// file's groups, a JWT's groups claim): a project's members may be groups.
//
// Projects: platform admins create them; --self-service-projects lets any
// signed-in user create up to --max-projects-per-user, which it owns and
// administers. A project's admins manage its members; roles come from the
// projects bucket, watched, as well as from tokens and JWTs.
//
// TLS: --tls-cert and --tls-key (ATOLL_GATEWAY_TLS_CERT, _KEY) name the
// PEM certificate and key the gateway serves HTTPS with (TLS 1.2 at
// least, with Strict-Transport-Security); it reads them again when they
// change, so a renewed certificate needs no restart. A gateway without
// them refuses to start unless --insecure-plain-http is given: plain HTTP
// is for development and tests, or behind a proxy that terminates TLS on
// the same host.
package main

import (
	"errors"
	"strings"

	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

func main() {
	cfg := &gateway.Config{}
	daemon.Run(command(cfg, new(bool)), fx.Supply(cfg), gateway.Module)
}

// command is the gateway's command line, filling cfg; plain says whether
// plain HTTP was asked for.
func command(cfg *gateway.Config, plain *bool) daemon.Command {
	var proxies string
	return daemon.Command{
		Service: "gateway",
		About:   "serves the Compute API, its docs and the web console",
		Flags: func(f *daemon.FlagSet) {
			f.Duration(&cfg.Auth.MaxJWTLifetime, "jwt-max-lifetime", "ATOLL_GATEWAY_JWT_MAX_LIFETIME", auth.DefaultMaxJWTLifetime, "the longest a JWT may live (exp - iat, and exp - now)")
			f.String(&proxies, "trusted-proxies", "ATOLL_GATEWAY_TRUSTED_PROXIES", "", "comma-separated CIDRs of the load balancers whose X-Forwarded-For names the client")
			f.String(&cfg.Listen, "listen", "ATOLL_GATEWAY_LISTEN", "127.0.0.1:8080", "the Compute API's HTTP address")
			f.String(&cfg.Auth.TokensFile, "tokens", "ATOLL_GATEWAY_TOKENS", "", "YAML file of API tokens (SHA-256 digests, subjects, roles)")
			f.String(&cfg.Auth.JWKSFile, "jwks", "ATOLL_GATEWAY_JWKS", "", "JSON Web Key Set verifying JWTs (needs --jwt-issuer and --jwt-audience)")
			f.String(&cfg.Auth.Issuer, "jwt-issuer", "ATOLL_GATEWAY_JWT_ISSUER", "", "the iss every JWT must carry")
			f.String(&cfg.Auth.Audience, "jwt-audience", "ATOLL_GATEWAY_JWT_AUDIENCE", "", "the aud every JWT must carry")
			f.Float64(&cfg.RatePerSecond, "rate", "ATOLL_GATEWAY_RATE", 50, "requests per second allowed to each identity")
			f.Int(&cfg.Burst, "burst", "ATOLL_GATEWAY_BURST", 100, "requests each identity may send at once above the rate")
			f.String(&cfg.PublicURL, "public-url", "ATOLL_GATEWAY_PUBLIC_URL", "", "the gateway's URL as browsers reach it (https://host[:port]): the console's exec WebSocket must come from it; empty: from the host the request names")
			f.String(&cfg.TLS.CertFile, "tls-cert", "ATOLL_GATEWAY_TLS_CERT", "", "PEM certificate (chain) to serve HTTPS with; re-read when it changes")
			f.String(&cfg.TLS.KeyFile, "tls-key", "ATOLL_GATEWAY_TLS_KEY", "", "PEM private key of --tls-cert")
			f.Bool(&cfg.SelfServiceProjects, "self-service-projects", "ATOLL_GATEWAY_SELF_SERVICE_PROJECTS", false, "let any signed-in user create projects, which it owns and administers (otherwise only platform admins create them)")
			f.Int(&cfg.MaxProjectsPerUser, "max-projects-per-user", "ATOLL_GATEWAY_MAX_PROJECTS_PER_USER", gateway.DefaultMaxProjectsPerUser, "how many projects a user may create with --self-service-projects")
			f.String(&cfg.EventsIssuerFile, "events-issuer", "ATOLL_GATEWAY_EVENTS_ISSUER", "", "the events issuer's seed file (atoll-admin bootstrap auth's events-issuer.nk): answer the NATS auth callout and issue events credentials")
			f.String(&cfg.EventsNATSURL, "events-nats-url", "ATOLL_GATEWAY_EVENTS_NATS_URL", "", "the NATS URL events credentials are told to connect to")
			f.Bool(plain, "insecure-plain-http", "ATOLL_GATEWAY_INSECURE_PLAIN_HTTP", false, "serve plain HTTP without a certificate: development and tests only, bearer tokens then travel in clear")
		},
		Validate: func() error {
			if proxies != "" {
				cfg.TrustedProxies = strings.Split(proxies, ",")
			}
			return validate(cfg, *plain)
		},
	}
}

// errNoTokenSource is the refusal of a gateway that could authenticate
// nobody.
const errNoTokenSource = "no token source: set --tokens (ATOLL_GATEWAY_TOKENS) or --jwks (ATOLL_GATEWAY_JWKS); without one every request would be refused with 401"

// errNoTLS is the refusal of a gateway that would send tokens in clear
// without being told to.
const errNoTLS = "no certificate: set --tls-cert and --tls-key (ATOLL_GATEWAY_TLS_CERT, ATOLL_GATEWAY_TLS_KEY), or --insecure-plain-http (ATOLL_GATEWAY_INSECURE_PLAIN_HTTP) for development only"

func validate(cfg *gateway.Config, plain bool) error {
	if cfg.Auth.TokensFile == "" && cfg.Auth.JWKSFile == "" {
		return errors.New(errNoTokenSource)
	}
	if cfg.Auth.JWKSFile != "" && (cfg.Auth.Issuer == "" || cfg.Auth.Audience == "") {
		return errors.New("--jwks needs --jwt-issuer (ATOLL_GATEWAY_JWT_ISSUER) and --jwt-audience (ATOLL_GATEWAY_JWT_AUDIENCE): without them a token issued to any other application would do")
	}
	if cfg.MaxProjectsPerUser <= 0 {
		return errors.New("--max-projects-per-user (ATOLL_GATEWAY_MAX_PROJECTS_PER_USER) must be positive")
	}
	if cfg.RatePerSecond <= 0 || cfg.Burst <= 0 {
		return errors.New("--rate (ATOLL_GATEWAY_RATE) and --burst (ATOLL_GATEWAY_BURST) must be positive")
	}
	switch {
	case (cfg.TLS.CertFile == "") != (cfg.TLS.KeyFile == ""):
		return errors.New("--tls-cert (ATOLL_GATEWAY_TLS_CERT) and --tls-key (ATOLL_GATEWAY_TLS_KEY) go together")
	case cfg.TLS.Enabled() && plain:
		return errors.New("--insecure-plain-http with a certificate: give one or the other")
	case !cfg.TLS.Enabled() && !plain:
		return errors.New(errNoTLS)
	}
	return nil
}
