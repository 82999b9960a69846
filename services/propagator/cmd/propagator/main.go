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
package main

import (
	"strings"

	"go.uber.org/fx"

	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon"
	"atoll.dev/services/propagator"
)

func main() {
	var baseline, ingressClass string
	daemon.Run(daemon.Command{
		Service:  "propagator",
		About:    "applies workload shards to member clusters",
		Clusters: true,
		Flags: func(f *daemon.FlagSet) {
			f.String(&baseline, "baseline-projects", "ATOLL_PROPAGATOR_BASELINE_PROJECTS", "",
				"comma-separated projects granted the Pod Security level baseline (their pods may run as root); every other tenant namespace enforces restricted")
			f.String(&ingressClass, "ingress-class", "ATOLL_PROPAGATOR_INGRESS_CLASS", propagator.DefaultIngressClass,
				"ingress class of the Ingresses of exposed Apps: the IngressClass the member clusters' ingress controller serves")
		},
	},
		fx.Provide(func(cfg daemon.Config) (clusters.Members, error) { return clusters.Load(cfg.ClustersFile) }),
		fx.Provide(func() *propagator.Config {
			return &propagator.Config{BaselineProjects: projects(baseline), IngressClass: ingressClass}
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
