// Package kek_test checks the rotation of the key-encryption key of
// Secrets against a real region: `atoll-admin rotate-kek` has the
// propagator rewrap every stored Secret's data key, admission store each,
// and the old key can then be removed.
package kek_test

import (
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// One small region: zone a of 2 nodes (an App that reads a Secret), NATS
// on loopback TCP for atoll-admin.
var env *e2e.Env

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "kek", GatewayUser: "atoll-kek-e2e-gateway", Options: region.Options{Zones: []string{"a"}, Nodes: 2, Listen: true}},
		func(e *e2e.Env) { env = e })
}
