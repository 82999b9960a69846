package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// describeConfig writes a Config's keys (each a variable or a file, with
// its size) or a Secret's keys, version, digest, and who wrote its values
// and when; a Secret's values are never returned by the API.
func describeConfig(out io.Writer, w computeapi.Workload, now time.Time) {
	if w.Kind == kindSecret {
		s, err := sdk.SecretOf(&w)
		if err != nil {
			fmt.Fprintf(out, "\nKeys: unreadable: %v\n", err)
			return
		}
		fmt.Fprintf(out, "\nValues (sealed, never shown):\n")
		tw := newTable(out)
		fmt.Fprintf(tw, "  Keys:\t%s\n", orDash(strings.Join(s.Keys, ", ")))
		fmt.Fprintf(tw, "  Version:\t%d\n", s.Version)
		fmt.Fprintf(tw, "  Digest:\t%s\n", orDash(s.Digest))
		fmt.Fprintf(tw, "  Written by:\t%s\n", orDash(s.UpdatedBy))
		written := "-"
		if !s.Updated.IsZero() {
			written = fmt.Sprintf("%s (%s ago)", s.Updated.Local().Format(time.RFC3339), age(s.Updated, now))
		}
		fmt.Fprintf(tw, "  Written:\t%s\n", written)
		tw.Flush()
		return
	}
	c, err := sdk.ConfigOf(&w)
	if err != nil {
		fmt.Fprintf(out, "\nKeys: unreadable: %v\n", err)
		return
	}
	fmt.Fprintf(out, "\nKeys:\n")
	tw := newTable(out)
	fmt.Fprintf(tw, "  KEY\tAS\tBYTES\n")
	for _, k := range slices.Sorted(maps.Keys(c.Data)) {
		fmt.Fprintf(tw, "  %s\tvariable\t%d\n", k, len(c.Data[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(c.Files)) {
		fmt.Fprintf(tw, "  %s\tfile\t%d\n", k, len(c.Files[k]))
	}
	tw.Flush()
}

// describeConfigVersions writes, for an App that names Configs or
// Secrets, each one's version its template rolls to and the versions its
// running pods run in each zone (more than one while a change rolls
// through a zone; "-" where none runs yet).
func describeConfigVersions(out io.Writer, w computeapi.Workload) {
	st := w.Status
	ids := map[string]bool{}
	for id := range st.ConfigVersions {
		ids[id] = true
	}
	for _, z := range st.Zones {
		for id := range z.ConfigVersions {
			ids[id] = true
		}
	}
	if len(ids) == 0 {
		return
	}
	zones := sortedKeys(st.Zones)
	fmt.Fprintf(out, "\nConfig versions:\n")
	tw := newTable(out)
	fmt.Fprintf(tw, "  NAME\tTEMPLATE")
	for _, z := range zones {
		fmt.Fprintf(tw, "\tZONE %s", z)
	}
	fmt.Fprintln(tw)
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		fmt.Fprintf(tw, "  %s\t%s", id, orDash(st.ConfigVersions[id]))
		for _, z := range zones {
			fmt.Fprintf(tw, "\t%s", orDash(strings.Join(st.Zones[z].ConfigVersions[id], ",")))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
