package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// describeUpdateStrategy adds an App's update strategy (api.AppSpec's
// updateStrategy) to describe's rollout table.
func describeUpdateStrategy(tw io.Writer, w computeapi.Workload) {
	var spec struct {
		UpdateStrategy string `json:"updateStrategy"`
	}
	_ = json.Unmarshal(w.Spec, &spec) // a spec the API answered; the default otherwise
	how := "pods are replaced"
	if spec.UpdateStrategy == api.UpdateInPlaceIfPossible {
		how = "image-only changes are patched into the live pods"
	}
	fmt.Fprintf(tw, "  Update strategy:\t%s (%s)\n", cmp.Or(spec.UpdateStrategy, api.UpdateRollingUpdate), how)
}

// describeRevisions shows how many of an App's pods run each template
// revision, per zone ("a: 0a1b 2, 4e5f 1"), when the status says.
func describeRevisions(out io.Writer, w computeapi.Workload) {
	var lines []string
	for _, zone := range slices.Sorted(maps.Keys(w.Status.Zones)) {
		t := w.Status.Zones[zone].Templates
		if len(t) == 0 {
			continue
		}
		var parts []string
		for _, rev := range slices.Sorted(maps.Keys(t)) {
			parts = append(parts, fmt.Sprintf("%s %d", rev, t[rev]))
		}
		lines = append(lines, fmt.Sprintf("    %s:\t%s", zone, strings.Join(parts, ", ")))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(out, "  Pods by revision:\n")
	tw := newTable(out)
	for _, l := range lines {
		fmt.Fprintln(tw, l)
	}
	tw.Flush()
}
