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
