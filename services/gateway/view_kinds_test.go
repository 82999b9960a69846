package gateway

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// TestKindStatusViews: a CronJob's and a Daemon's statuses reach the API
// as the contract names them.
func TestKindStatusViews(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	st := &api.Status{Phase: api.PhaseRunning,
		CronJob: &api.CronJobStatus{Cluster: "zone-a", LastScheduleTime: &at, Active: 1,
			Runs: []api.CronJobRun{{Name: "tick-1", Cluster: "zone-a", ScheduledTime: &at, Outcome: api.RunActive}}},
		Daemon: &api.DaemonStatus{DaemonCounts: api.DaemonCounts{Desired: 3, Current: 3, Ready: 2, Updated: 3}, Behind: []string{"zone-b"},
			Clusters: map[string]api.DaemonCounts{"zone-b": {Desired: 3, Current: 3, Ready: 2, Updated: 3}}},
	}
	cronView, err := json.Marshal(statusView(api.KindCronJob, st))
	if err != nil {
		t.Fatal(err)
	}
	daemonView, err := json.Marshal(statusView(api.KindDaemon, st))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		CronJob struct {
			Cluster          string    `json:"cluster"`
			LastScheduleTime time.Time `json:"lastScheduleTime"`
			Active           int       `json:"active"`
			Runs             []struct {
				Name, Outcome string
			} `json:"runs"`
		} `json:"cronJob"`
		Daemon struct {
			Desired, Ready int
			Behind         []string
			Clusters       map[string]struct{ Ready int }
		} `json:"daemon"`
	}
	if err := json.Unmarshal(cronView, &got); err != nil {
		t.Fatal(err)
	}
	if c := got.CronJob; c.Cluster != "zone-a" || !c.LastScheduleTime.Equal(at) || c.Active != 1 || len(c.Runs) != 1 || c.Runs[0].Outcome != "Active" {
		t.Errorf("cronJob %+v from %s", c, cronView)
	}
	if err := json.Unmarshal(daemonView, &got); err != nil {
		t.Fatal(err)
	}
	if d := got.Daemon; d.Desired != 3 || d.Ready != 2 || len(d.Behind) != 1 || d.Clusters["zone-b"].Ready != 2 {
		t.Errorf("daemon %+v from %s", d, daemonView)
	}
	if strings.Contains(string(cronView), `"daemon"`) || strings.Contains(string(daemonView), `"cronJob"`) {
		t.Errorf("a kind's view carries another kind's part:\n%s\n%s", cronView, daemonView)
	}
	if b, _ := json.Marshal(statusView(api.KindApp, &api.Status{Phase: api.PhaseRunning})); string(b) != `{"phase":"Running"}` {
		t.Errorf("an App's status view %s carries the other kinds' fields", b)
	}
}

// TestAppStatusView: an exposed App's host and addresses reach the API.
func TestAppStatusView(t *testing.T) {
	st := &api.Status{Phase: api.PhaseRunning, Expose: &api.ExposeStatus{Host: "web.example.com", Path: "/", Ingresses: 2,
		Addresses: []api.IngressAddress{{Cluster: "zone-a", Zone: "a", IP: "192.0.2.1"}, {Cluster: "zone-b", Zone: "b", Hostname: "lb.example.net"}}}}
	b, err := json.Marshal(statusView(api.KindApp, st))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Expose api.ExposeStatus `json:"expose"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*st.Expose, got.Expose); diff != "" {
		t.Errorf("expose (-want +got):\n%s", diff)
	}
	b, err = json.Marshal(statusView(api.KindApp, &api.Status{Phase: api.PhaseRunning}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "expose") {
		t.Errorf("an App not exposed has an expose status: %s", b)
	}
}

// TestAppPodsByRevisionView: an App's pods by template revision reach the
// API per zone and per cluster.
func TestAppPodsByRevisionView(t *testing.T) {
	revs := map[string]int32{"0a1b": 1, "4e5f": 2}
	st := &api.Status{Phase: api.PhaseProgressing,
		Zones: map[string]api.ZoneStatus{"a": {Desired: 3, Templates: revs}}, Clusters: map[string]api.ZoneStatus{"zone-a": {Desired: 3, Templates: revs}}}
	v := statusView(api.KindApp, st)
	if diff := cmp.Diff(revs, v.Zones["a"].Templates); diff != "" {
		t.Errorf("zone a (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(revs, v.Clusters["zone-a"].Templates); diff != "" {
		t.Errorf("cluster zone-a (-want +got):\n%s", diff)
	}
}

// TestEveryKindHasAView: every registered kind has an entry in kindViews
// (nil when the counts say it all), and the table names no other kind: a
// kind added to api without a gateway view fails here.
func TestEveryKindHasAView(t *testing.T) {
	if diff := cmp.Diff(api.KindNames(), slices.Sorted(maps.Keys(kindViews))); diff != "" {
		t.Errorf("kinds with a gateway view (-api.KindNames +kindViews):\n%s", diff)
	}
}
