package sdk

import (
	"context"

	"atoll.dev/libs/computeapi"
)

// Remediation returns, per member cluster, what the remediation service
// sees and does: pause, storm breakers, disruption leases, and the
// unhealthy nodes with their phase, why and history (platform admins).
// cluster "" asks for every cluster.
func (c *Client) Remediation(ctx context.Context, cluster string) ([]computeapi.RemediationCluster, error) {
	r, err := c.API.GetRemediationWithResponse(ctx, &computeapi.GetRemediationParams{Cluster: cluster})
	l, err := decode[computeapi.RemediationStatus]("get remediation", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// PauseRemediation stops new remediation actions in a cluster, or the
// whole region when cluster is "", with a reason shown in the status
// (platform admins); escalations already running go on. Retried like a
// PUT: pausing twice is pausing. It returns the status of the scope.
func (c *Client) PauseRemediation(ctx context.Context, cluster, reason string) ([]computeapi.RemediationCluster, error) {
	r, err := c.API.PauseRemediationWithResponse(repeatable(ctx), computeapi.RemediationPause{Cluster: cluster, Reason: reason})
	l, err := decode[computeapi.RemediationStatus]("pause remediation", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// ResumeRemediation lifts the pause of a cluster, or of the region when
// cluster is "" (platform admins). Retried like a PUT.
func (c *Client) ResumeRemediation(ctx context.Context, cluster string) ([]computeapi.RemediationCluster, error) {
	r, err := c.API.ResumeRemediationWithResponse(repeatable(ctx), computeapi.RemediationPause{Cluster: cluster})
	l, err := decode[computeapi.RemediationStatus]("resume remediation", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}
