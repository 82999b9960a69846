package gateway

import (
	"encoding/json"
	"testing"
	"time"

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
	b, err := json.Marshal(statusView(st))
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
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	c, d := got.CronJob, got.Daemon
	if c.Cluster != "zone-a" || !c.LastScheduleTime.Equal(at) || c.Active != 1 || len(c.Runs) != 1 || c.Runs[0].Outcome != "Active" {
		t.Errorf("cronJob %+v from %s", c, b)
	}
	if d.Desired != 3 || d.Ready != 2 || len(d.Behind) != 1 || d.Clusters["zone-b"].Ready != 2 {
		t.Errorf("daemon %+v from %s", d, b)
	}
	if b, _ := json.Marshal(statusView(&api.Status{Phase: api.PhaseRunning})); string(b) != `{"phase":"Running"}` {
		t.Errorf("an App's status view %s carries the other kinds' fields", b)
	}
}
