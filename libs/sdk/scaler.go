package sdk

import (
	"context"

	"atoll.dev/libs/computeapi"
)

// ScalerHistory returns a Scaler's recent decisions, oldest first.
func (c *Client) ScalerHistory(ctx context.Context, project, name string) ([]computeapi.ScalerDecision, error) {
	r, err := c.API.GetScalerHistoryWithResponse(ctx, project, name)
	h, err := decode[computeapi.ScalerHistory]("scaler history", r, err)
	if err != nil {
		return nil, err
	}
	return h.Decisions, nil
}

// PushMetric pushes a sample of an App's custom metric (its total over
// the App) for the autoscaler.
func (c *Client) PushMetric(ctx context.Context, project, app, metric string, value float64) error {
	r, err := c.API.PushMetricWithResponse(ctx, project, app, metric, computeapi.MetricSample{Value: value})
	return noContent("push metric", r, err)
}
