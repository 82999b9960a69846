// Command gateway runs the Compute API: REST under /v1 (the contract is
// served at /openapi.yaml, rendered at /docs), the web console at
// /console/, authentication, authorization, rate limits and audit.
//
// Credentials: ATOLL_GATEWAY_TOKENS names a YAML file of API tokens, kept
// as SHA-256 digests ({tokens: [{subject, sha256, platformAdmin, roles:
// {project: viewer|developer|admin}}]}); ATOLL_GATEWAY_JWKS names a JSON Web
// Key Set whose keys verify JWTs (claims sub, exp, atoll.dev/roles,
// atoll.dev/platform-admin), whose iss and aud must equal
// ATOLL_GATEWAY_JWT_ISSUER and ATOLL_GATEWAY_JWT_AUDIENCE (both required
// with a JWKS).
package main

import (
	"os"
	"strconv"

	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

func main() {
	daemon.Main("gateway", "serves the Compute API, its docs and the web console", false,
		fx.Provide(func() *gateway.Config {
			rate, _ := strconv.ParseFloat(os.Getenv("ATOLL_GATEWAY_RATE"), 64)
			burst, _ := strconv.Atoi(os.Getenv("ATOLL_GATEWAY_BURST"))
			return &gateway.Config{
				Listen: os.Getenv("ATOLL_GATEWAY_LISTEN"),
				Auth: auth.Config{
					TokensFile: os.Getenv("ATOLL_GATEWAY_TOKENS"),
					JWKSFile:   os.Getenv("ATOLL_GATEWAY_JWKS"),
					Issuer:     os.Getenv("ATOLL_GATEWAY_JWT_ISSUER"),
					Audience:   os.Getenv("ATOLL_GATEWAY_JWT_AUDIENCE"),
				},
				RatePerSecond: rate,
				Burst:         burst,
			}
		}),
		gateway.Module)
}
