package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

func TestTrainingJobDescribeShowsRanks(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 5, 30, 0, time.UTC)
	w := computeapi.Workload{Kind: api.KindTrainingJob, Metadata: computeapi.Metadata{Name: "resnet"}, Status: computeapi.WorkloadStatus{
		Phase: api.PhaseRunning, Desired: 2, Ready: 2,
		Training: computeapi.TrainingStatus{Cluster: "zone-b", Workers: 2, Attempt: 2, Requeues: 1,
			LastRequeue: "attempt 1 in zone-a: not all 2 workers Running within 300s of its placement",
			Ranks: []computeapi.TrainingRank{
				{Rank: 0, Pod: "resnet-0-abcde", Phase: "Running", Node: "a100-0"},
				{Rank: 1, Pod: "resnet-1-fghij", Phase: "Running", Node: "a100-1", Restarts: 1},
			}},
	}}
	var out bytes.Buffer
	describeWorkload(&out, w, nil, nil, now)
	for _, want := range []string{"Gang:", "zone-b", "Requeues:", "Last requeue:", "RANK", "resnet-0-abcde", "a100-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("describe lacks %q:\n%s", want, out.String())
		}
	}
}
