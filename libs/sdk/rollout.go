package sdk

import (
	"context"

	"atoll.dev/libs/computeapi"
)

// Rollout returns an App's zone-by-zone rollout.
func (c *Client) Rollout(ctx context.Context, project, app string) (*computeapi.Rollout, error) {
	r, err := c.API.GetRolloutWithResponse(ctx, project, app)
	return decode[computeapi.Rollout]("get rollout", r, err)
}

// OperateRollout pauses, resumes or undoes an App's rollout (action
// "pause", "resume" or "undo"). Not retried after a server error: each
// is recorded with its own time.
func (c *Client) OperateRollout(ctx context.Context, project, app, action string) (*computeapi.Workload, error) {
	r, err := c.API.OperateRolloutWithResponse(ctx, project, app, action)
	return decode[computeapi.Workload]("rollout "+action, r, err)
}

// Endpoints returns an App's Service ports, its address and its pods'
// endpoints per zone and cluster.
func (c *Client) Endpoints(ctx context.Context, project, app string) (*computeapi.Endpoints, error) {
	r, err := c.API.GetEndpointsWithResponse(ctx, project, "app", app)
	return decode[computeapi.Endpoints]("get endpoints", r, err)
}
