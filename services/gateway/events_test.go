package gateway_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
)

// TestEventList lists workloads' events over HTTP: every event the
// stream holds for the workload, in order, none of another's; pages and
// positions; 404 only for a workload neither known nor with events.
func TestEventList(t *testing.T) {
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1e9, Burst: 1 << 30})
	seedFuzzRegion(t.Context(), t, g) // p/app/web is known
	publish := func(name, event string) int64 {
		data, _ := json.Marshal(api.WorkloadEvent{Project: "p", Kind: "App", Name: name, Event: event, Generation: 1, Time: time.Now().UTC()})
		ack, err := g.Bus.JS.Publish(t.Context(), bus.EventSubject("p", "App", name, event), data)
		require.NoError(t, err)
		return int64(ack.Sequence)
	}
	lifecycle := []string{api.EventAdmitted, api.EventScheduled, api.EventPropagated, api.EventRunning}
	var ids []int64
	for _, e := range lifecycle {
		ids = append(ids, publish("web", e))
		publish("gone", e) // a workload deleted since: its events stay listed
	}

	tests := []struct {
		name       string
		path       string
		wantStatus int
		want       []string // the events listed
		wantFirst  int64    // the first one's id
	}{
		{name: "every event", path: "web/events", wantStatus: http.StatusOK, want: lifecycle, wantFirst: ids[0]},
		{name: "a page", path: "web/events?limit=2", wantStatus: http.StatusOK, want: lifecycle[:2], wantFirst: ids[0]},
		{name: "the next page", path: "web/events?limit=2&after=" + strconv.FormatInt(ids[1], 10), wantStatus: http.StatusOK, want: lifecycle[2:], wantFirst: ids[2]},
		{name: "after the last", path: "web/events?after=" + strconv.FormatInt(ids[3], 10), wantStatus: http.StatusOK},
		{name: "a deleted workload's", path: "gone/events", wantStatus: http.StatusOK, want: lifecycle, wantFirst: ids[0] + 1},
		{name: "unknown, no events", path: "none/events", wantStatus: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := g.do(t, http.MethodGet, "/v1/projects/p/workloads/app/"+tt.path, g.Admin, nil)
			require.Equal(t, tt.wantStatus, resp.StatusCode, "%s", body)
			if tt.wantStatus != http.StatusOK {
				return
			}
			var l computeapi.EventList
			require.NoError(t, json.Unmarshal(body, &l))
			var got []string
			for _, e := range l.Items {
				got = append(got, e.Event)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if len(l.Items) > 0 {
				assert.Equal(t, tt.wantFirst, l.Items[0].Id, "first id")
			}
		})
	}
}
