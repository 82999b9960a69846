package cli

import (
	"bytes"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// TestDescribePod: describe shows a Pod's cluster, UID and claim, and per
// container its type, running image and restart count; other kinds and a
// Pod not running anywhere show none of it.
func TestDescribePod(t *testing.T) {
	w := computeapi.Workload{Kind: api.KindPod, Metadata: computeapi.Metadata{Name: "db"}, Status: computeapi.WorkloadStatus{
		Phase: api.PhaseRunning, Pod: computeapi.PodStatus{Cluster: "zone-b", Uid: "u-1",
			Volume: computeapi.PodVolumeStatus{Claim: "db-data-zone-b", Phase: "Bound", Capacity: "1Gi"},
			Containers: []computeapi.PodContainerStatus{
				{Name: "shipper", Type: "sidecar", Image: "shipper:2", RestartCount: 1, Ready: true, State: "Running"},
				{Name: "app", Type: "container", Image: "app:1", Ready: true, State: "Running"},
			}}}}
	var out bytes.Buffer
	describePod(&out, w)
	want := `
Pod:
Cluster: zone-b
UID: u-1
Volume: db-data-zone-b Bound 1Gi

Containers:
NAME TYPE IMAGE RESTARTS READY STATE
shipper sidecar shipper:2 1 true Running
app container app:1 0 true Running
`
	if got := squeeze(out.String()); got != squeeze(want) {
		t.Errorf("describe:\n%s\nwant:\n%s", got, squeeze(want))
	}
	for _, other := range []computeapi.Workload{
		{Kind: api.KindApp, Status: w.Status},
		{Kind: api.KindPod, Status: computeapi.WorkloadStatus{Phase: api.PhasePending}},
	} {
		out.Reset()
		describePod(&out, other)
		if out.Len() > 0 {
			t.Errorf("describe of a %s with status %+v: %q", other.Kind, other.Status.Pod, out.String())
		}
	}
}
