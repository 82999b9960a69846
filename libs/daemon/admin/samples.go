package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Samples are a registry's series in a form tests compare easily: by
// name{label="value",...} with the labels sorted by name, a counter's or
// gauge's value, a histogram's or summary's sample count.
type Samples map[string]float64

// Gather returns the samples of g (a Server's Registry).
func Gather(g prometheus.Gatherer) (Samples, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	return samplesOf(mfs), nil
}

// Scrape returns the samples a service's admin port serves at
// baseURL/metrics (Server.URL), as Prometheus would read them.
func Scrape(ctx context.Context, baseURL string) (Samples, error) {
	byName, err := ScrapeFamilies(ctx, baseURL)
	if err != nil {
		return nil, err
	}
	mfs := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		mfs = append(mfs, mf)
	}
	return samplesOf(mfs), nil
}

// ScrapeFamilies returns the metric families a service's admin port
// serves at baseURL/metrics, by name, whole (a summary's sum included).
func ScrapeFamilies(ctx context.Context, baseURL string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", baseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", baseURL, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", baseURL, err)
	}
	return byName, nil
}

func samplesOf(mfs []*dto.MetricFamily) Samples {
	out := Samples{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			slices.Sort(labels)
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Histogram != nil:
				out[key] = float64(m.Histogram.GetSampleCount())
			case m.Summary != nil:
				out[key] = float64(m.Summary.GetSampleCount())
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			default:
				out[key] = m.Untyped.GetValue()
			}
		}
	}
	return out
}
