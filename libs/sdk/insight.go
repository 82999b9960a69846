package sdk

import (
	"context"

	"atoll.dev/libs/computeapi"
)

// Tiers are the quota tiers, in order.
var Tiers = []string{"Reserved", "OnDemand", "Preemptible"}

// WhoAmI returns the caller's identity and roles.
func (c *Client) WhoAmI(ctx context.Context) (*computeapi.Identity, error) {
	r, err := c.API.WhoAmIWithResponse(ctx)
	return decode[computeapi.Identity]("whoami", r, err)
}

// Kinds returns the kinds of workload the region knows, sorted by name,
// with what applies to each (pods, operations).
func (c *Client) Kinds(ctx context.Context) ([]computeapi.KindInfo, error) {
	r, err := c.API.ListKindsWithResponse(ctx)
	l, err := decode[computeapi.KindList]("list kinds", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Projects returns the projects the caller holds a role in.
func (c *Client) Projects(ctx context.Context) ([]computeapi.Project, error) {
	r, err := c.API.ListProjectsWithResponse(ctx)
	l, err := decode[computeapi.ProjectList]("list projects", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Quota returns a project's limits and usage per tier.
func (c *Client) Quota(ctx context.Context, project string) (*computeapi.Quota, error) {
	r, err := c.API.GetQuotaWithResponse(ctx, project)
	return decode[computeapi.Quota]("get quota", r, err)
}

// SetQuota sets a project's limit for one tier (platform admins): the
// amounts given are caps (0 forbids), the others follow the region's default.
func (c *Client) SetQuota(ctx context.Context, project, tier string, limit computeapi.QuotaLimit) (*computeapi.Quota, error) {
	r, err := c.API.SetQuotaWithResponse(ctx, project, tier, limit)
	return decode[computeapi.Quota]("set quota", r, err)
}

// Clusters returns the region's member clusters (platform admins).
func (c *Client) Clusters(ctx context.Context) ([]computeapi.Cluster, error) {
	r, err := c.API.ListClustersWithResponse(ctx)
	l, err := decode[computeapi.ClusterList]("list clusters", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Cluster returns one member cluster (platform admins).
func (c *Client) Cluster(ctx context.Context, name string) (*computeapi.Cluster, error) {
	r, err := c.API.GetClusterWithResponse(ctx, name)
	return decode[computeapi.Cluster]("get cluster", r, err)
}

// Cordon cordons a cluster (no new shards go there), or uncordons it when
// cordon is false (platform admins). Retried like a PUT.
func (c *Client) Cordon(ctx context.Context, name string, cordon bool) (*computeapi.Cluster, error) {
	action := "uncordon"
	if cordon {
		action = "cordon"
	}
	r, err := c.API.CordonClusterWithResponse(repeatable(ctx), name, action)
	return decode[computeapi.Cluster](action+" cluster", r, err)
}

// EditLabels sets and removes a cluster's labels (platform admins).
// Retried like a PUT: the outcome does not depend on repetition.
func (c *Client) EditLabels(ctx context.Context, name string, set map[string]string, remove []string) (*computeapi.Cluster, error) {
	p := computeapi.LabelPatch{Set: set, Remove: remove}
	r, err := c.API.EditClusterLabelsWithResponse(repeatable(ctx), name, p)
	return decode[computeapi.Cluster]("edit cluster labels", r, err)
}
