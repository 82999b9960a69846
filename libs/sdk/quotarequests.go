package sdk

import (
	"context"
	"fmt"
	"strings"

	"atoll.dev/libs/computeapi"
)

// RequestQuota asks for a tier's limits of a project to change (the
// project's admins); the request waits for a platform admin. Not retried:
// a second attempt would file a second request.
func (c *Client) RequestQuota(ctx context.Context, project string, req computeapi.QuotaRequestCreate) (*computeapi.QuotaRequest, error) {
	r, err := c.API.CreateQuotaRequestWithResponse(ctx, project, req)
	return decode[computeapi.QuotaRequest]("request quota", r, err)
}

// QuotaRequests lists quota requests, oldest first: a project's (its
// members), or every project's when project is empty (platform admins);
// state ("pending", "approving", "approved", "rejected"; "" any) filters.
func (c *Client) QuotaRequests(ctx context.Context, project, state string) ([]computeapi.QuotaRequest, error) {
	var l *computeapi.QuotaRequestList
	var err error
	if project == "" {
		r, rerr := c.API.ListQuotaRequestsWithResponse(ctx, &computeapi.ListQuotaRequestsParams{State: computeapi.ListQuotaRequestsParamsState(state)})
		l, err = decode[computeapi.QuotaRequestList]("list quota requests", r, rerr)
	} else {
		r, rerr := c.API.ListProjectQuotaRequestsWithResponse(ctx, project, &computeapi.ListProjectQuotaRequestsParams{State: computeapi.ListProjectQuotaRequestsParamsState(state)})
		l, err = decode[computeapi.QuotaRequestList]("list quota requests", r, rerr)
	}
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// ApproveQuotaRequest approves a request by its ID (<project>-<number>),
// applying its limits (platform admins). Retried: a repeated approve
// finishes an approval under way and applies the limits once.
func (c *Client) ApproveQuotaRequest(ctx context.Context, id, reason string) (*computeapi.QuotaRequest, error) {
	return c.decideQuota(repeatable(ctx), id, "approve", reason)
}

// RejectQuotaRequest rejects a request, with a reason (platform admins).
func (c *Client) RejectQuotaRequest(ctx context.Context, id, reason string) (*computeapi.QuotaRequest, error) {
	return c.decideQuota(ctx, id, "reject", reason)
}

func (c *Client) decideQuota(ctx context.Context, id, decision, reason string) (*computeapi.QuotaRequest, error) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return nil, fmt.Errorf("%s quota request %q: an ID is <project>-<number>", decision, id)
	}
	r, err := c.API.DecideQuotaRequestWithResponse(ctx, id[:i], id, decision, computeapi.QuotaDecision{Reason: reason})
	return decode[computeapi.QuotaRequest](decision+" quota request", r, err)
}
