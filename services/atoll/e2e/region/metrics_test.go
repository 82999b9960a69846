package region_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/daemon/admin"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// TestAdminPortsOfEveryService scrapes every service's admin port after
// an App is created through the gateway and runs: each is ready, and each
// serves the series of its concern with non-zero counts.
func TestAdminPortsOfEveryService(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	for _, s := range region.Services {
		url := reg.AdminURL(s.Name, 0)
		require.NotEmpty(t, url, s.Name)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			resp, err := http.Get(url + "/readyz")
			require.NoError(c, err)
			resp.Body.Close()
			assert.Equal(c, http.StatusOK, resp.StatusCode, "%s /readyz", s.Name)
		}, 30*time.Second, 100*time.Millisecond)
	}
	mustStatus(t, http.StatusCreated, http.MethodPost, "/v1/projects/scrape/workloads", reg.AdminToken, gwApp("web", 3, nil))
	waitPhase(t, reg.AdminToken, "/v1/projects/scrape/workloads/app/web", "Running")

	want := map[string][]string{
		"admission": {`atoll_micro_request_duration_seconds{endpoint="submit",service="admission"}`, `atoll_lease_held{lease="admission-repair",service="admission"}`,
			// The fill of the buckets it writes (libs/bus StreamFill).
			`atoll_stream_fill_ratio{service="admission",stream="KV_workloads"}`, `atoll_stream_max_bytes{service="admission",stream="KV_workloads"}`},
		"scheduler": {`atoll_reconcile_duration_seconds{queue="work",service="scheduler"}`, `atoll_reconcile_lag_seconds{queue="work",service="scheduler"}`, `atoll_lease_held{lease="scheduler",service="scheduler"}`,
			`atoll_caches_filled{service="scheduler"}`}, // ready before its caches fill; 1 once they have
		"propagator": {`atoll_propagator_apply_duration_seconds{cluster=`, `atoll_reconcile_lag_seconds{queue="work/`, `atoll_lease_held{lease="propagator.`, `atoll_caches_filled{service="propagator"}`},
		"aggregator": {`atoll_reconcile_duration_seconds{queue="status",service="aggregator"}`, `atoll_lease_held{lease="aggregator-status",service="aggregator"}`, `atoll_reconcile_duration_seconds{queue="observe/`},
		"gateway": {`atoll_http_requests_total{code="201",method="POST",route="/v1/projects/{project}/workloads",service="gateway"}`,
			`atoll_sli_api_requests_total{service="gateway"}`, `atoll_sli_submit_to_propagated_seconds{service="gateway",start="admitted",tier="OnDemand"}`,
			`atoll_sli_submit_to_running_seconds{service="gateway",start="admitted",tier="OnDemand"}`,
			// The audit stream it writes to.
			`atoll_stream_fill_ratio{service="gateway",stream="ATOLL_AUDIT"}`, `atoll_caches_filled{service="gateway"}`},
		"quota": {`go_goroutines{service="quota"}`},
		// No Scaler here: its lease is what the autoscaler shows
		// (services/atoll/e2e/autoscale scales Apps).
		"autoscaler": {`atoll_lease_held{lease="autoscaler",service="autoscaler"}`},
		// Every member cluster reachable, under a lease per cluster.
		"remediation": {`atoll_lease_held{lease="remediation.`, `atoll_remediation_cluster_reachable{cluster=`},
		// One lease for the region's rotations.
		"upgrade": {`atoll_lease_held{lease="upgrade",service="upgrade"}`},
	}
	for name, series := range want {
		t.Run(name, func(t *testing.T) {
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				got, err := admin.Scrape(ctx, reg.AdminURL(name, 0))
				require.NoError(c, err)
				for _, prefix := range series {
					found := false
					for k, v := range got {
						found = found || strings.HasPrefix(k, prefix) && v > 0
					}
					assert.True(c, found, "no %s... > 0", prefix)
				}
			}, 30*time.Second, 250*time.Millisecond)
		})
	}
}
