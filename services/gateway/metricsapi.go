package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

// Limits of custom metric pushes, per App (on top of the caller's own
// rate limit): the autoscaler evaluates on each sample.
const (
	MetricPushPerSecond = 5
	MetricPushBurst     = 20
)

// PushMetric publishes a sample of an App's custom metric for the
// autoscaler on atoll.metrics.<project>.<app>.<metric>: a developer of
// the project may push for an App that exists; cpu and memory are the
// platform's own measurements and cannot be pushed.
func (s *Service) PushMetric(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, app, metric string) {
	if !allow(w, r, project, auth.RoleDeveloper, true) {
		return
	}
	if !api.IsDNSLabel(app) || !api.IsDNSLabel(metric) {
		writeFieldError(w, r, "metric", api.CodeInvalid, "the App and the metric are DNS labels")
		return
	}
	if metric == api.MetricCPU || metric == api.MetricMemory {
		writeFieldError(w, r, "metric", api.CodeForbidden, metric+" is measured by the platform; push custom metrics only")
		return
	}
	if _, found, ok := s.cached(w, r, api.Key(project, api.KindApp, app)); !ok {
		return
	} else if !found {
		writeError(w, r, http.StatusNotFound, "NotFound", "not found")
		return
	}
	if ok, after := s.metricLimits.take(project + "/" + app); !ok {
		secs := max(1, int(math.Ceil(after.Seconds())))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, r, http.StatusTooManyRequests, "RateLimited",
			fmt.Sprintf("App %s may push %d metric samples per second; retry after %ds", app, MetricPushPerSecond, secs))
		return
	}
	var in computeapi.MetricSample
	if !decodeBody(w, r, &in) {
		return
	}
	if in.Value < 0 || math.IsNaN(in.Value) || math.IsInf(in.Value, 0) {
		writeFieldError(w, r, "value", api.CodeInvalid, "a metric's value is a finite number, at least 0")
		return
	}
	at := in.Time
	if now := time.Now(); at.IsZero() || at.After(now) {
		at = now // a sample from the future would outlive its staleness
	}
	body, err := json.Marshal(api.MetricSample{Value: in.Value, At: at.UTC()})
	if err != nil {
		writeFailure(w, r, http.StatusInternalServerError, "Internal", "the sample could not be encoded", err)
		return
	}
	if err := s.bus.NC.Publish(bus.MetricsSubject(project, app, metric), body); err != nil {
		w.Header().Set("Retry-After", "1")
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region did not take the sample; retry", err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}
