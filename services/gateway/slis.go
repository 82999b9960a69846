package gateway

import (
	"math"
	"net/http"
	"sync"
	"time"

	"atoll.dev/libs/computeapi"
)

// The SLI history: the last hour of the indicators, per minute, for the
// console's charts (GET /v1/slis). Prometheus keeps the long history from
// /metrics; this one exists so a browser can draw the last hour without a
// Prometheus in reach. It is fed exactly where the atoll_sli_* series are
// recorded (httpMetrics.observe and launchSLI.observe), so it holds what
// they count: no admin server, no metrics, and an empty history.
//
// sliMinutes slots form a ring indexed by the Unix minute; a slot holding
// an older minute than the one being written is reset first, and a reader
// shows a slot only if it holds the minute asked for. The memory is fixed
// (60 slots of a few dozen integers) whatever the traffic: launch
// latencies are counted in launchBounds' exponential buckets, from which
// the quantiles are estimated as Prometheus' histogram_quantile does
// (linear within a bucket), never above the largest observation.

// sliMinutes is how many minutes the history holds.
const sliMinutes = 60

// launchBounds are the upper bounds of the launch latency buckets in
// seconds: 10 ms to 5.5 min, doubling, as atoll_sli_submit_to_running_seconds.
var launchBounds = func() []float64 {
	b := make([]float64, 16)
	for i := range b {
		b[i] = 0.01 * math.Pow(2, float64(i))
	}
	return b
}()

// sliHistory is the ring. A nil *sliHistory records nothing and reads as
// an hour of empty minutes.
type sliHistory struct {
	mu    sync.Mutex
	slots [sliMinutes]sliSlot // mu must be held; minute m lives at m % sliMinutes
}

// sliSlot is one minute's counts.
type sliSlot struct {
	minute           int64 // the Unix minute counted here; 0: never used
	requests, errors int64
	launches         int64
	buckets          [17]int64 // launches per launchBounds bucket, the last one above them all
	launchMax        float64   // seconds
}

func newSLIHistory() *sliHistory { return &sliHistory{} }

func unixMinute(t time.Time) int64 { return t.Unix() / 60 }

// slot returns the slot of t's minute, reset if it held an older one; nil
// when the slot holds a newer minute (t is over an hour behind the
// latest write). h.mu must be held.
func (h *sliHistory) slot(t time.Time) *sliSlot {
	m := unixMinute(t)
	s := &h.slots[((m%sliMinutes)+sliMinutes)%sliMinutes]
	switch {
	case s.minute == m:
		return s
	case s.minute > m:
		return nil
	}
	*s = sliSlot{minute: m}
	return s
}

// request counts one Compute API request answered at t; failed is a 5xx.
func (h *sliHistory) request(t time.Time, failed bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.slot(t); s != nil {
		s.requests++
		if failed {
			s.errors++
		}
	}
}

// launch counts one generation that reached running at t, d after it started.
func (h *sliHistory) launch(t time.Time, d time.Duration) {
	if h == nil {
		return
	}
	sec := max(d.Seconds(), 0)
	i := len(launchBounds)
	for j, b := range launchBounds {
		if sec <= b {
			i = j
			break
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.slot(t); s != nil {
		s.launches++
		s.buckets[i]++
		s.launchMax = max(s.launchMax, sec)
	}
}

// snapshot returns the hour that ends with now's minute, oldest first.
func (h *sliHistory) snapshot(now time.Time) computeapi.SLIHistory {
	out := computeapi.SLIHistory{IntervalSeconds: 60, Minutes: make([]computeapi.SLIMinute, 0, sliMinutes)}
	last := unixMinute(now)
	if h != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
	}
	for m := last - sliMinutes + 1; m <= last; m++ {
		p := computeapi.SLIMinute{Start: time.Unix(m*60, 0).UTC()}
		if h != nil {
			if s := &h.slots[((m%sliMinutes)+sliMinutes)%sliMinutes]; s.minute == m {
				p.Requests, p.Errors, p.Launches = s.requests, s.errors, s.launches
				if s.launches > 0 {
					p.LaunchP50Seconds = s.quantile(0.5)
					p.LaunchP95Seconds = s.quantile(0.95)
					p.LaunchMaxSeconds = s.launchMax
				}
			}
		}
		out.Minutes = append(out.Minutes, p)
	}
	return out
}

// quantile estimates the q-quantile of the slot's launch latencies:
// linear within the bucket that holds it, at most the largest one seen.
func (s *sliSlot) quantile(q float64) float64 {
	rank := q * float64(s.launches)
	var seen int64
	for i, n := range s.buckets {
		if n == 0 || float64(seen+n) < rank {
			seen += n
			continue
		}
		if i == len(launchBounds) {
			return s.launchMax // above every bound: only the maximum is known
		}
		lower := 0.0
		if i > 0 {
			lower = launchBounds[i-1]
		}
		est := lower + (launchBounds[i]-lower)*(rank-float64(seen))/float64(n)
		return min(est, s.launchMax)
	}
	return s.launchMax
}

// GetSLIs answers the last hour of the SLIs, per minute, to any signed-in
// caller: what the console draws.
func (s *Service) GetSLIs(w http.ResponseWriter, _ *http.Request) {
	var h *sliHistory
	if s.reqs != nil {
		h = s.reqs.history
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, h.snapshot(time.Now()))
}
