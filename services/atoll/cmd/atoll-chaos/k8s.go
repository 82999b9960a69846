package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// k8sRegion is the region deployed with deploy/k8s (make k8s-test): it is
// hurt with kubectl, as an operator would, one fault at a time, each
// followed by the wait for its workload to be whole again:
//
//   - a pod of every service deleted with --grace-period=0 --force;
//   - a NATS server's pod deleted the same way;
//   - every service and the NATS servers drained through the Eviction API,
//     as `kubectl drain` does: two pods evicted at once, of which the
//     PodDisruptionBudget must refuse the second until the first is
//     replaced (a PDB that lets both go fails the test);
//   - every Deployment restarted with `kubectl rollout restart`, which
//     replaces its pods one by one within the Deployment's surge and
//     unavailability bounds.
//
// Its member clusters are read from this host through kubeconfigs whose
// servers name zone-<z>, reached on 127.0.0.1 (the node's members listen
// there too). With a Prometheus address it also reports the canary's
// rounds and the alerts that were pending or firing during the test.
type k8sRegion struct {
	kubeconfig string
	namespace  string
	members    string
	prometheus string
	services   []string
}

func (r k8sRegion) kubectl(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--kubeconfig", r.kubeconfig, "-n", r.namespace}, args...)
	out, err := exec.CommandContext(ctx, "kubectl", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl %s: %w: %s", strings.Join(args[4:], " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// injectFaults runs the faults one at a time, each at least window's 90%
// divided by their count after the one before, so the submissions span
// them; one that takes longer pushes the next.
func (r k8sRegion) injectFaults(ctx context.Context, log *slog.Logger, o options, window time.Duration) []string {
	var steps []func() string
	for _, s := range r.services {
		steps = append(steps, func() string {
			return r.deletePod(ctx, log, "deployment", "atoll-"+s, "app.kubernetes.io/name=atoll-"+s)
		})
	}
	steps = append(steps, func() string { return r.deletePod(ctx, log, "statefulset", "nats", "app.kubernetes.io/name=nats") })
	for _, s := range r.services {
		steps = append(steps, func() string { return r.drain(ctx, log, "deployment", "atoll-"+s, "app.kubernetes.io/name=atoll-"+s) })
	}
	steps = append(steps, func() string { return r.drain(ctx, log, "statefulset", "nats", "app.kubernetes.io/name=nats") })
	for _, s := range r.services {
		steps = append(steps, func() string { return r.restart(ctx, log, "atoll-"+s) })
	}
	gap := window * 9 / 10 / time.Duration(len(steps))
	var done []string
	for _, step := range steps {
		next := time.Now().Add(gap)
		done = append(done, step())
		time.Sleep(time.Until(next)) // spreading the faults over the submissions is the subject
	}
	return done
}

// pods lists the names of the pods selector matches, sorted.
func (r k8sRegion) pods(ctx context.Context, selector string) ([]string, error) {
	out, err := r.kubectl(ctx, "get", "pods", "-l", selector, "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil {
		return nil, err
	}
	names := strings.Fields(out)
	sort.Strings(names)
	return names, nil
}

// deletePod force-deletes the first of a workload's pods (by name), then
// waits until the workload has every replica available again.
func (r k8sRegion) deletePod(ctx context.Context, log *slog.Logger, kind, name, selector string) string {
	names, err := r.pods(ctx, selector)
	if err != nil || len(names) == 0 {
		return fmt.Sprintf("delete a pod of %s FAILED: none found (%v)", name, err)
	}
	// A StatefulSet's first pod is often the one the others joined; take
	// the second when there is one, as the compose test does.
	pod := names[0]
	if kind == "statefulset" && len(names) > 1 {
		pod = names[1]
	}
	if _, err := r.kubectl(ctx, "delete", "pod", pod, "--grace-period=0", "--force", "--wait=false"); err != nil {
		return "delete pod " + pod + " FAILED: " + err.Error()
	}
	log.Info("fault: pod deleted (--grace-period=0 --force)", "pod", pod)
	start := time.Now()
	time.Sleep(2 * time.Second) // the controller's time to see the pod gone, so the wait below sees the gap
	if _, err := r.kubectl(ctx, "rollout", "status", kind+"/"+name, "--timeout=5m"); err != nil {
		return "deleted pod " + pod + ", FAILED to come back: " + err.Error()
	}
	return fmt.Sprintf("deleted pod %s (whole again after %s)", pod, time.Since(start).Round(time.Second))
}

// drain evicts two of a workload's pods at once through the Eviction API,
// which honours PodDisruptionBudgets (each workload's allows one pod down):
// the first must be evicted and the second refused (429). Once the first
// is replaced, the second is evicted (retried while the budget still
// counts the replacement as not ready), and the workload made whole again.
func (r k8sRegion) drain(ctx context.Context, log *slog.Logger, kind, name, selector string) string {
	names, err := r.pods(ctx, selector)
	if err != nil || len(names) < 2 {
		return fmt.Sprintf("drain %s FAILED: fewer than 2 pods (%v)", name, err)
	}
	start := time.Now()
	if err := r.evict(ctx, names[0]); err != nil {
		return fmt.Sprintf("drain %s FAILED: the first eviction (%s) was refused: %v", name, names[0], err)
	}
	err = r.evict(ctx, names[1])
	if err == nil {
		return fmt.Sprintf("drain %s FAILED: its PodDisruptionBudget let %s and %s be evicted at once", name, names[0], names[1])
	}
	if !strings.Contains(err.Error(), "disruption budget") {
		return fmt.Sprintf("drain %s FAILED: the second eviction (%s) failed, not for the budget: %v", name, names[1], err)
	}
	log.Info("fault: drain: evicted one pod, the budget refused the next", "evicted", names[0], "refused", names[1])
	deadline := time.Now().Add(3 * time.Minute)
	for {
		time.Sleep(time.Second) // the budget counts the first pod's replacement once it is ready
		err := r.evict(ctx, names[1])
		if err == nil {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "disruption budget") {
			return fmt.Sprintf("drain %s FAILED: evicting %s after %s's replacement: %v", name, names[1], names[0], err)
		}
	}
	if _, err := r.kubectl(ctx, "rollout", "status", kind+"/"+name, "--timeout=5m"); err != nil {
		return "drained " + name + ", FAILED to come back: " + err.Error()
	}
	return fmt.Sprintf("drained %s (budget refused the 2nd eviction until the 1st was replaced; whole again after %s)", name, time.Since(start).Round(time.Second))
}

// evict asks the Eviction API to evict a pod.
func (r k8sRegion) evict(ctx context.Context, pod string) error {
	body := fmt.Sprintf(`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":%q,"namespace":%q}}`, pod, r.namespace)
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", r.kubeconfig, "create", "--raw",
		"/api/v1/namespaces/"+r.namespace+"/pods/"+pod+"/eviction", "-f", "-")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("evict %s: %w: %s", pod, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// restart is `kubectl rollout restart` and the wait for its end.
func (r k8sRegion) restart(ctx context.Context, log *slog.Logger, deployment string) string {
	if _, err := r.kubectl(ctx, "rollout", "restart", "deployment/"+deployment); err != nil {
		return "rollout restart " + deployment + " FAILED: " + err.Error()
	}
	log.Info("fault: rollout restart", "deployment", deployment)
	start := time.Now()
	if _, err := r.kubectl(ctx, "rollout", "status", "deployment/"+deployment, "--timeout=5m"); err != nil {
		return "rollout restart " + deployment + " FAILED to finish: " + err.Error()
	}
	return fmt.Sprintf("restarted %s (%s)", deployment, time.Since(start).Round(time.Second))
}

// deployments lists a namespace's Deployments in a member cluster through
// its kubeconfig in r.members, at 127.0.0.1 on the server's port with the
// server's name for TLS.
func (r k8sRegion) deployments(ctx context.Context, cluster, namespace string) (map[string]deployment, error) {
	path := filepath.Join(r.members, cluster+".kubeconfig")
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", cluster, err)
	}
	kc := cfg.Contexts[cfg.CurrentContext]
	if kc == nil || cfg.Clusters[kc.Cluster] == nil {
		return nil, fmt.Errorf("member %s: %s has no current cluster", cluster, path)
	}
	u, err := url.Parse(cfg.Clusters[kc.Cluster].Server)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", cluster, err)
	}
	out, err := exec.CommandContext(ctx, "kubectl", "--kubeconfig", path, "--server", "https://127.0.0.1:"+u.Port(), "--tls-server-name", u.Hostname(),
		"get", "deployments", "-n", namespace, "-o", "json").Output()
	if err != nil {
		return nil, fmt.Errorf("list deployments in %s: %w", cluster, err)
	}
	return perWorkload(out)
}

// report prints the canary's rounds and the alerts pending or firing
// between from and to, from Prometheus. It fails only when Prometheus
// cannot be asked: what fired is for the reader to judge against the
// faults.
func (r k8sRegion) report(ctx context.Context, from, to time.Time) error {
	if r.prometheus == "" {
		return nil
	}
	// The canary's rounds that ended in the test's window.
	rng := fmt.Sprintf("%ds", int(to.Sub(from).Seconds())+1)
	rounds, err := r.query(ctx, "/api/v1/query", url.Values{
		"query": {`sum by (outcome) (increase(atoll_canary_rounds_total[` + rng + `]))`},
		"time":  {strconv.FormatInt(to.Unix(), 10)},
	})
	if err != nil {
		return fmt.Errorf("prometheus: the canary's rounds: %w", err)
	}
	outcome := map[string]float64{}
	for _, s := range rounds {
		outcome[s.Metric["outcome"]] = s.value()
	}
	ok, failed := outcome["success"], outcome["failure"]
	ratio := "n/a"
	if ok+failed > 0 {
		ratio = fmt.Sprintf("%.1f%%", 100*ok/(ok+failed))
	}
	fmt.Printf("  canary: %.0f rounds passed, %.0f failed during the test: success ratio %s\n", ok, failed, ratio)

	// Every alert that was pending or firing in the window, with its span.
	alerts, err := r.query(ctx, "/api/v1/query_range", url.Values{
		"query": {`ALERTS`},
		"start": {strconv.FormatInt(from.Unix(), 10)},
		"end":   {strconv.FormatInt(to.Add(time.Minute).Unix(), 10)},
		"step":  {"15"},
	})
	if err != nil {
		return fmt.Errorf("prometheus: the alerts: %w", err)
	}
	if len(alerts) == 0 {
		fmt.Println("  alerts: none pending or firing")
	}
	for _, a := range alerts {
		var labels []string
		for k, v := range a.Metric {
			if k != "__name__" && k != "alertname" && k != "alertstate" {
				labels = append(labels, k+"="+v)
			}
		}
		sort.Strings(labels)
		first, last := a.span()
		fmt.Printf("  alert %s %s {%s}: %s to %s after the start\n", a.Metric["alertname"], a.Metric["alertstate"], strings.Join(labels, ","),
			first.Sub(from).Round(time.Second), last.Sub(from).Round(time.Second))
	}
	return nil
}

// series is one series of a Prometheus answer, instant or range.
type series struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

func (s series) value() float64 {
	if len(s.Value) != 2 {
		return 0
	}
	v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
	return v
}

// span is the first and last sample time of a range series.
func (s series) span() (time.Time, time.Time) {
	at := func(p []any) time.Time {
		f, _ := strconv.ParseFloat(fmt.Sprint(p[0]), 64)
		return time.Unix(int64(f), 0)
	}
	if len(s.Values) == 0 {
		return time.Time{}, time.Time{}
	}
	return at(s.Values[0]), at(s.Values[len(s.Values)-1])
}

func (r k8sRegion) query(ctx context.Context, path string, q url.Values) ([]series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(r.prometheus, "/")+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []series `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("%s: %w", resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", resp.Status, body.Error)
	}
	return body.Data.Result, nil
}
