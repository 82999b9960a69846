// Command propagator runs the propagator service: it applies each shard of
// a placement to its member cluster with server-side apply.
//
// Tenant namespaces enforce the Pod Security level restricted; a platform
// admin grants a project baseline with --baseline-projects
// (ATOLL_PROPAGATOR_BASELINE_PROJECTS, comma-separated).
//
// Sealed Secrets are opened with the private key-encryption keys in the
// directory --kek-dir names (ATOLL_PROPAGATOR_KEK_DIR: every
// kek-<id>.key, from `atoll-admin bootstrap kek`; keys added there are
// picked up without a restart). The propagator is the only service that
// holds them.
package main

import (
	"strings"

	"go.uber.org/fx"

	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon"
	"atoll.dev/libs/envelope"
	"atoll.dev/services/propagator"
)

func main() {
	var baseline, kekDir string
	daemon.Run(daemon.Command{
		Service:  "propagator",
		About:    "applies workload shards to member clusters",
		Clusters: true,
		Flags: func(f *daemon.FlagSet) {
			f.String(&baseline, "baseline-projects", "ATOLL_PROPAGATOR_BASELINE_PROJECTS", "",
				"comma-separated projects granted the Pod Security level baseline (their pods may run as root); every other tenant namespace enforces restricted")
			f.String(&kekDir, "kek-dir", "ATOLL_PROPAGATOR_KEK_DIR", "",
				"directory of the private key-encryption keys (kek-<id>.key) that open sealed Secrets; without it Secrets are not rendered")
		},
	},
		fx.Provide(func(cfg daemon.Config) (clusters.Members, error) { return clusters.Load(cfg.ClustersFile) }),
		fx.Provide(func() (*propagator.Config, error) {
			cfg := &propagator.Config{BaselineProjects: projects(baseline)}
			if kekDir == "" {
				return cfg, nil
			}
			kr, err := envelope.LoadKeyring(kekDir)
			cfg.Keyring = kr
			return cfg, err
		}),
		propagator.Module)
}

// projects splits a comma-separated list, dropping empty entries.
func projects(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
