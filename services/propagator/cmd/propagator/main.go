// Command propagator runs the propagator service: it applies each shard of
// a placement to its member cluster with server-side apply.
//
// Tenant namespaces enforce the Pod Security level restricted; a platform
// admin grants a project baseline with --baseline-projects
// (ATOLL_PROPAGATOR_BASELINE_PROJECTS, comma-separated).
//
// An exposed App (spec.expose) is an Ingress in each member cluster that
// runs it, of the ingress class --ingress-class
// (ATOLL_PROPAGATOR_INGRESS_CLASS, default "atoll"): name the IngressClass
// that the member clusters' ingress controller serves.
//
// Secrets are opened with the key-encryption keys in --kek-dir
// (ATOLL_PROPAGATOR_KEK_DIR; libs/envelope): without it, a workload that
// names a Secret is not applied.
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
	var baseline, ingressClass, kekDir string
	daemon.Run(daemon.Command{
		Service:  "propagator",
		About:    "applies workload shards to member clusters",
		Clusters: true,
		Flags: func(f *daemon.FlagSet) {
			f.String(&baseline, "baseline-projects", "ATOLL_PROPAGATOR_BASELINE_PROJECTS", "",
				"comma-separated projects granted the Pod Security level baseline (their pods may run as root); every other tenant namespace enforces restricted")
			f.String(&ingressClass, "ingress-class", "ATOLL_PROPAGATOR_INGRESS_CLASS", propagator.DefaultIngressClass,
				"ingress class of the Ingresses of exposed Apps: the IngressClass the member clusters' ingress controller serves")
			f.String(&kekDir, "kek-dir", "ATOLL_PROPAGATOR_KEK_DIR", "",
				"directory of the key-encryption keys (kek-<id>.key) that open Secrets; none: Secrets are not written to member clusters")
		},
	},
		fx.Provide(func(cfg daemon.Config) (clusters.Members, error) { return clusters.Load(cfg.ClustersFile) }),
		fx.Provide(func() (*propagator.Config, error) {
			cfg := &propagator.Config{BaselineProjects: projects(baseline), IngressClass: ingressClass}
			if kekDir != "" {
				k, err := envelope.LoadKeyring(kekDir)
				if err != nil {
					return nil, err
				}
				cfg.Keyring = k
			}
			return cfg, nil
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
