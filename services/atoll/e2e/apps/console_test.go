package apps

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"atoll.dev/libs/api"
	"atoll.dev/libs/browsertest"
	"atoll.dev/services/atoll/e2e"
)

// shownEndpoint is one row of the console's endpoints table.
type shownEndpoint struct {
	Zone    string `json:"zone"`
	Cluster string `json:"cluster"`
	IP      string `json:"ip"`
	Port    string `json:"port"`
	Ready   bool   `json:"ready"`
	Pod     string `json:"pod"`
}

// shownZone is one row of the console's per-zone summary.
type shownZone struct {
	Zone     string `json:"zone"`
	Cluster  string `json:"cluster"`
	Ready    string `json:"ready"`
	NotReady string `json:"notReady"`
}

// endpointsOnPage reads the App page's endpoints card.
const endpointsOnPage = `({
	rows: [...document.querySelectorAll('#endpoints tbody tr')].map((tr) => ({
		zone: tr.dataset.zone, cluster: tr.dataset.cluster, pod: tr.dataset.pod, ready: tr.dataset.ready === 'true',
		ip: tr.querySelector('[data-field=address]').textContent, port: tr.querySelector('[data-field=port]').textContent,
	})),
	zones: [...document.querySelectorAll('#endpoints-zones tbody tr')].map((tr) => ({
		zone: tr.dataset.zone, cluster: tr.dataset.cluster,
		ready: tr.querySelector('[data-field=ready]').textContent, notReady: tr.querySelector('[data-field=notready]').textContent,
	})),
	address: document.querySelector('#endpoints-meta [data-field=address]')?.textContent ?? '',
	hidden: document.querySelector('#endpoints-card').hidden,
})`

type endpointsPage struct {
	Rows    []shownEndpoint `json:"rows"`
	Zones   []shownZone     `json:"zones"`
	Address string          `json:"address"`
	Hidden  bool            `json:"hidden"`
}

// perZone counts the addresses of m (address → zone) in each zone.
func perZone(m map[string]string) map[string]int {
	out := map[string]int{}
	for _, z := range m {
		out[z]++
	}
	return out
}

// TestConsoleEndpoints: the App's page in the console (in Chromium) shows
// its endpoints table, the ready pods of every zone and cluster with
// their address and port, the same as the member clusters' ready pods;
// after a scale from 3 to 6 the open page follows (2 per zone) without a
// reload, and a pod turned not ready shows as such in its zone's count.
// `atoll endpoints app NAME` prints one row per pod, the same per zone
// counts.
func TestConsoleEndpoints(t *testing.T) {
	e2e.Need(t)
	browsertest.Skip(t)
	ctx := t.Context()
	const name = "front"
	_, err := cl.Submit(ctx, webDoc(name, 3))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Delete(context.Background(), project, api.KindApp, name) })
	address := name + "." + api.Namespace(project) + ".svc.cluster.local"

	token := reg.Token("dev@"+project, false, map[string]string{project: "developer"})
	tab := browsertest.Open(t, browsertest.Options{Timeout: 3 * time.Minute})
	start := time.Now()
	tab.Do("open the App's page", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/#/p/"+project+"/App/"+name),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#endpoints-card")),
	)

	// The page lists what the member clusters run: every ready pod with
	// its zone, one per zone, on the named port.
	check := func(n int) map[string]string {
		t.Helper()
		var want map[string]string
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var err error
			want, err = readyAddresses(ctx, name)
			if !assert.NoError(ct, err) || !assert.Len(ct, want, n, "ready pods in the clusters") {
				return
			}
			page, err := chromedp.Run(tab.Ctx, chromedp.Evaluate[endpointsPage](endpointsOnPage))
			if !assert.NoError(ct, err) {
				return
			}
			got := map[string]string{}
			for _, r := range page.Rows {
				if r.Ready {
					got[r.IP] = r.Zone
				}
				assert.Equal(ct, "zone-"+r.Zone, r.Cluster, "row of %s", r.Pod)
				assert.Equal(ct, "8080/TCP", r.Port, "row of %s", r.Pod)
			}
			assert.Equal(ct, want, got, "the ready rows (address → zone)")
			var zones []shownZone
			for _, z := range slices.Sorted(maps.Keys(perZone(want))) {
				zones = append(zones, shownZone{Zone: z, Cluster: "zone-" + z, Ready: itoa(perZone(want)[z]), NotReady: "0"})
			}
			assert.Equal(ct, zones, page.Zones, "the per-zone counts")
			assert.Equal(ct, address, page.Address)
			assert.False(ct, page.Hidden)
		}, 90*time.Second, 250*time.Millisecond, "the console's endpoints table with %d ready pods", n)
		return want
	}
	want := check(3)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, perZone(want))
	t.Logf("the console lists the 3 ready endpoints %v after %v", sortedKeys(want), time.Since(start).Round(time.Millisecond))
	checkCLI(t, name, want)

	// A scale to 6: the open page follows.
	six := int32(6)
	scaled := time.Now()
	_, err = cl.Operate(ctx, api.Operation{Project: project, Kind: api.KindApp, Name: name, Op: api.OpScale, Replicas: &six})
	require.NoError(t, err)
	want = check(6)
	assert.Equal(t, map[string]int{"a": 2, "b": 2, "c": 2}, perZone(want))
	t.Logf("after the scale to 6 the open page lists 2 ready endpoints per zone within %v", time.Since(scaled).Round(time.Millisecond))
	checkCLI(t, name, want)

	// A pod of zone b turns not ready (KWOK's pod-unready stage): its row
	// says so and zone b counts one ready, one not.
	zb := reg.Env.Cluster("zone-b")
	pods, err := livePods(ctx, zb, name)
	require.NoError(t, err)
	require.Len(t, pods, 2)
	sick := pods[0]
	_, err = zb.Client.CoreV1().Pods(sick.Namespace).Patch(ctx, sick.Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"unready.stage.kwok.x-k8s.io":"true"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	sickAt := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		page, err := chromedp.Run(tab.Ctx, chromedp.Evaluate[endpointsPage](endpointsOnPage))
		if !assert.NoError(ct, err) {
			return
		}
		var sickRow *shownEndpoint
		for i, r := range page.Rows {
			if r.Pod == sick.Name {
				sickRow = &page.Rows[i]
			}
		}
		if assert.NotNil(ct, sickRow, "a row for %s", sick.Name) {
			assert.False(ct, sickRow.Ready, "the row of %s", sick.Name)
			assert.Equal(ct, sick.Status.PodIP, sickRow.IP)
		}
		assert.Contains(ct, page.Zones, shownZone{Zone: "b", Cluster: "zone-b", Ready: "1", NotReady: "1"})
		assert.Len(ct, page.Rows, 6)
	}, 60*time.Second, 250*time.Millisecond, "the not-ready pod in the console")
	t.Logf("a pod turned not ready: the open page shows it within %v", time.Since(sickAt).Round(time.Millisecond))
	tab.Screenshot("with a pod not ready") // kept with go test -artifacts
}

// checkCLI runs `atoll endpoints app NAME` and checks its table: the
// address and port, one row per ready pod (zone, cluster, pod, address,
// ready), as many per zone as want has.
func checkCLI(t *testing.T, name string, want map[string]string) {
	t.Helper()
	var out string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out = atoll(t, "endpoints", "app", name)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if !assert.GreaterOrEqual(ct, len(lines), 4, "address, ports, a blank line, the heading") {
			return
		}
		assert.Equal(ct, "Address:  "+name+"."+api.Namespace(project)+".svc.cluster.local", lines[0])
		assert.Equal(ct, "Ports:    http 8080/TCP (http)", lines[1])
		assert.Equal(ct, []string{"ZONE", "CLUSTER", "POD", "ADDRESS", "READY", "NODE"}, strings.Fields(lines[3]))
		got := map[string]string{}
		for _, l := range lines[4:] {
			f := strings.Fields(l)
			if !assert.Len(ct, f, 6, "row %q", l) {
				continue
			}
			zone, cluster, pod, ip, ready := f[0], f[1], f[2], f[3], f[4]
			assert.Equal(ct, "zone-"+zone, cluster, "row %q", l)
			assert.True(ct, strings.HasPrefix(pod, name+"-"), "row %q names a pod of %s", l, name)
			if assert.Equal(ct, "yes", ready, "row %q", l) {
				got[ip] = zone
			}
		}
		assert.Equal(ct, want, got, "the CLI's rows (address → zone)")
		assert.Equal(ct, perZone(want), perZone(got), "the CLI's rows per zone")
	}, 30*time.Second, 250*time.Millisecond, "atoll endpoints app %s", name)
	t.Logf("atoll endpoints app %s:\n%s", name, out)
}

func itoa(n int) string { return strconv.Itoa(n) }
