// Package natsevents holds the end-to-end tests of events credentials: a
// project's own subscribers reading its events over NATS with the NATS
// CLI (natscli, built by `make tools`) as the outside client. One small
// member cluster; the embedded NATS listens on loopback for the CLI.
package natsevents

import (
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

var reg *region.Region

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "natsevents", Options: region.Options{Zones: []string{"a"}, Nodes: 2, Listen: true}},
		func(e *e2e.Env) { reg = e.Region })
}
