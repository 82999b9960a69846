package tiers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"atoll.dev/libs/computeapi"
)

// getAPI reads path from the Compute API (the region's gateway) as a
// platform admin into out.
func getAPI(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, reg.GatewayURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+reg.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return json.Unmarshal(body, out)
}

// apiQuotaTier is one tier's row of project's quota in the Compute API.
func apiQuotaTier(ctx context.Context, project, tier string) (computeapi.TierQuota, error) {
	var q computeapi.Quota
	if err := getAPI(ctx, "/v1/projects/"+project+"/quota", &q); err != nil {
		return computeapi.TierQuota{}, err
	}
	for _, t := range q.Tiers {
		if t.Tier == tier {
			return t, nil
		}
	}
	return computeapi.TierQuota{}, fmt.Errorf("quota of %s: no tier %s in %+v", project, tier, q.Tiers)
}

// apiApp is an App of project as the Compute API shows it.
func apiApp(ctx context.Context, project, name string) (computeapi.Workload, error) {
	var w computeapi.Workload
	err := getAPI(ctx, "/v1/projects/"+project+"/workloads/app/"+name, &w)
	return w, err
}
