package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

func TestClustersShowTheBurstBuffer(t *testing.T) {
	cs := []computeapi.Cluster{
		{Name: "zone-a", Zone: "a", Labels: map[string]string{api.LabelBufferPercent: "20"}},
		{Name: "zone-b", Zone: "b"},
	}
	var list bytes.Buffer
	printClusters(&list, cs)
	lines := strings.Split(strings.TrimSpace(list.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "BUFFER") || !strings.Contains(lines[1], "20%") || strings.Contains(lines[2], "%") {
		t.Errorf("clusters list:\n%s", list.String())
	}
	var one bytes.Buffer
	describeCluster(&one, cs[0], time.Now())
	if !strings.Contains(one.String(), "Burst buffer:") || !strings.Contains(one.String(), "20% of each pool") {
		t.Errorf("cluster description:\n%s", one.String())
	}
}
