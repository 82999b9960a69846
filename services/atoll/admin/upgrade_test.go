package admin

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"atoll.dev/services/upgrade/plan"
)

func TestPrintUpgrade(t *testing.T) {
	at := time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	v := planView{Name: "v2",
		Spec: plan.Spec{Target: plan.Target{Label: "atoll.dev/node-version", Value: "v2"}, Clusters: []plan.ClusterStep{
			{Name: "zone-c", Pools: []plan.PoolStep{{Name: "general"}}},
			{Name: "zone-a", Pools: []plan.PoolStep{{Name: "general"}, {Name: "gpu"}}},
		}},
		Progress: plan.Progress{Phase: plan.PhasePaused, PausedBy: plan.ByGate, Reason: "SLO gate: App p.app.web below its budget in zone-a: 1/3 ready",
			Cluster: 1, Pool: 0, Wave: 2, Nodes: map[string]*plan.Node{
				"u1": {Name: "zone-c-general-0", Cluster: "zone-c", Pool: "general", State: plan.NodeDone},
				"u2": {Name: "zone-a-general-0", Cluster: "zone-a", Pool: "general", State: plan.NodeDone},
				"u3": {Name: "zone-a-general-1", Cluster: "zone-a", Pool: "general", State: plan.NodeDraining, Since: at, Why: "blocked"},
			}}}
	var b bytes.Buffer
	printUpgrade(&b, []planView{v})
	out := b.String()
	require.Contains(t, out, "PLAN v2  atoll.dev/node-version=v2  Paused  (SLO gate: App p.app.web below its budget in zone-a: 1/3 ready)")
	require.Regexp(t, `zone-c\s+general\s+done\s+done=1`, out)
	require.Regexp(t, `zone-a\s+general\s+2 \(current\)\s+done=1 draining=1`, out)
	require.Regexp(t, `zone-a\s+gpu\s+-`, out)
	require.Contains(t, out, "node zone-a/zone-a-general-1: draining since 23:00:00 blocked")
}

func TestExamplePlanIsValid(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/examples/rotation.yaml")
	require.NoError(t, err)
	var s plan.Spec
	require.NoError(t, yaml.UnmarshalStrict(raw, &s))
	s.Default()
	require.NoError(t, s.Validate())
	require.Equal(t, "zone-c", s.Clusters[0].Name)
	require.Equal(t, 2*time.Minute, s.Soak.Duration)
	require.Equal(t, "Europe/Paris", s.Windows[0].TimeZone)
}
