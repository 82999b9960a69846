package sdk

import (
	"context"

	"atoll.dev/libs/computeapi"
)

// Upgrades returns every node rotation plan with its progress per cluster
// and pool, without the per-node list (platform admins).
func (c *Client) Upgrades(ctx context.Context) ([]computeapi.Upgrade, error) {
	r, err := c.API.ListUpgradesWithResponse(ctx)
	l, err := decode[computeapi.UpgradeList]("list upgrades", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Upgrade returns one rotation plan, its control and its progress per
// cluster, pool, wave and node (platform admins).
func (c *Client) Upgrade(ctx context.Context, name string) (*computeapi.Upgrade, error) {
	r, err := c.API.GetUpgradeWithResponse(ctx, name)
	return decode[computeapi.Upgrade]("get upgrade", r, err)
}

// PutUpgrade creates or replaces a rotation plan (platform admins); an
// invalid plan fails with every bad field named. Retried like a PUT.
func (c *Client) PutUpgrade(ctx context.Context, name string, plan computeapi.RotationPlan) (*computeapi.Upgrade, error) {
	r, err := c.API.PutUpgradeWithResponse(repeatable(ctx), name, plan)
	return decode[computeapi.Upgrade]("put upgrade", r, err)
}

// PauseUpgrade pauses a plan: no new node starts (platform admins).
// Retried: pausing twice is pausing once.
func (c *Client) PauseUpgrade(ctx context.Context, name, reason string) (*computeapi.Upgrade, error) {
	r, err := c.API.PauseUpgradeWithResponse(repeatable(ctx), name, computeapi.UpgradeAction{Reason: reason})
	return decode[computeapi.Upgrade]("pause upgrade", r, err)
}

// ResumeUpgrade lifts every pause of a plan given before it, the SLO
// gate's included (platform admins). Not retried: each resume counts.
func (c *Client) ResumeUpgrade(ctx context.Context, name string) (*computeapi.Upgrade, error) {
	r, err := c.API.ResumeUpgradeWithResponse(ctx, name, computeapi.UpgradeAction{})
	return decode[computeapi.Upgrade]("resume upgrade", r, err)
}

// AbortUpgrade aborts a plan, rolling back its nodes in flight per its
// policy (platform admins). Retried: aborting twice is aborting once.
func (c *Client) AbortUpgrade(ctx context.Context, name, reason string) (*computeapi.Upgrade, error) {
	r, err := c.API.AbortUpgradeWithResponse(repeatable(ctx), name, computeapi.UpgradeAction{Reason: reason})
	return decode[computeapi.Upgrade]("abort upgrade", r, err)
}
