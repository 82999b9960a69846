package sdk

import (
	"bytes"
	"context"
	"fmt"

	"atoll.dev/libs/computeapi"
)

// Sidecars returns the current version of the platform's managed sidecars
// (platform admins); NotFound before any version was set.
func (c *Client) Sidecars(ctx context.Context) (*computeapi.SidecarVersion, error) {
	r, err := c.API.GetSidecarsWithResponse(ctx)
	return decode[computeapi.SidecarVersion]("get sidecars", r, err)
}

// SetSidecars stores doc, a JSON computeapi.SidecarSpec, as the next
// version of the managed sidecars (platform admins); an invalid one fails
// with every bad field named. Not retried after it may have landed: a
// second set would be a second version.
func (c *Client) SetSidecars(ctx context.Context, doc []byte) (*computeapi.SidecarVersion, error) {
	r, err := c.API.SetSidecarsWithBodyWithResponse(ctx, "application/json", bytes.NewReader(doc))
	return decode[computeapi.SidecarVersion]("set sidecars", r, err)
}

// SidecarHistory returns every version of the managed sidecars, newest
// first (platform admins).
func (c *Client) SidecarHistory(ctx context.Context) ([]computeapi.SidecarVersion, error) {
	r, err := c.API.ListSidecarVersionsWithResponse(ctx)
	l, err := decode[computeapi.SidecarVersionList]("list sidecar versions", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// SidecarStatus returns which version of the managed sidecars the
// region's workloads run (platform admins).
func (c *Client) SidecarStatus(ctx context.Context) (*computeapi.SidecarStatus, error) {
	r, err := c.API.GetSidecarStatusWithResponse(ctx)
	return decode[computeapi.SidecarStatus]("get sidecar status", r, err)
}

// SidecarRollout applies op ("pause", "resume" or "abort") to the rollout
// of the managed sidecars, with reason (platform admins). Retried: each
// is idempotent but resume, whose repeat only lifts a pause again.
func (c *Client) SidecarRollout(ctx context.Context, op, reason string) (*computeapi.SidecarStatus, error) {
	body := computeapi.UpgradeAction{Reason: reason}
	switch op {
	case "pause":
		r, err := c.API.PauseSidecarsWithResponse(repeatable(ctx), body)
		return decode[computeapi.SidecarStatus]("pause sidecars", r, err)
	case "resume":
		r, err := c.API.ResumeSidecarsWithResponse(repeatable(ctx), body)
		return decode[computeapi.SidecarStatus]("resume sidecars", r, err)
	case "abort":
		r, err := c.API.AbortSidecarsWithResponse(repeatable(ctx), body)
		return decode[computeapi.SidecarStatus]("abort sidecars", r, err)
	}
	return nil, fmt.Errorf("sidecar rollout operation %q: want pause, resume or abort", op)
}
