package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/region"
)

// diagnose prints the object timeline of a few apps (ATOLL_BENCH_DIAG=1).
func diagnose(reg *region.Region, names []string, t0 map[string]time.Time) {
	if os.Getenv("ATOLL_BENCH_DIAG") == "" {
		return
	}
	ctx := context.Background()
	for _, name := range names {
		for _, c := range reg.Env.Clusters {
			ns := api.Namespace(project)
			d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			var mgrs []string
			for _, m := range d.ManagedFields {
				mgrs = append(mgrs, fmt.Sprintf("%s/%s@%s", m.Manager, m.Operation, m.Time.Sub(t0[name]).Round(time.Millisecond)))
			}
			rs, _ := c.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
			pods, _ := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
			line := fmt.Sprintf("%s %s: deploy +%v gen %d mgrs %v", name, c.Name, d.CreationTimestamp.Sub(t0[name]).Round(time.Millisecond), d.Generation, mgrs)
			for _, r := range rs.Items {
				line += fmt.Sprintf(" rs +%v", r.CreationTimestamp.Sub(t0[name]).Round(time.Millisecond))
			}
			for _, p := range pods.Items {
				line += fmt.Sprintf(" pod +%v", p.CreationTimestamp.Sub(t0[name]).Round(time.Millisecond))
			}
			fmt.Println(line)
		}
	}
}

// timeline writes, per app, its submit time and the arrival of its first
// events relative to it, to the file ATOLL_BENCH_TIMELINE names.
func timeline(names []string, t0 map[string]time.Time, seen map[string]map[string]time.Time, mu *sync.Mutex) {
	path := os.Getenv("ATOLL_BENCH_TIMELINE")
	if path == "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	var first time.Time
	for _, n := range names {
		if first.IsZero() || t0[n].Before(first) {
			first = t0[n]
		}
	}
	var b strings.Builder
	b.WriteString("app,submit_s,admitted_ms,scheduled_ms,propagated_ms\n")
	ms := func(ev, n string) string {
		t, ok := seen[ev][n]
		if !ok {
			return ""
		}
		return fmt.Sprintf("%.1f", float64(t.Sub(t0[n]).Microseconds())/1000)
	}
	for _, n := range names {
		fmt.Fprintf(&b, "%s,%.3f,%s,%s,%s\n", n, t0[n].Sub(first).Seconds(), ms(api.EventAdmitted, n), ms(api.EventScheduled, n), ms(api.EventPropagated, n))
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}
