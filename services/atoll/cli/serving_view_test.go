package cli

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

func TestDescribeServing(t *testing.T) {
	app := func(e computeapi.ExposeStatus) computeapi.Workload {
		return computeapi.Workload{Kind: api.KindApp, Metadata: computeapi.Metadata{Project: "shop", Name: "web"}, Status: computeapi.WorkloadStatus{Expose: e}}
	}
	serving := &computeapi.Endpoints{Address: "web.atoll-shop.svc.cluster.local",
		Ports: []computeapi.ServicePort{{Name: "http", Port: 8080, Protocol: "TCP", AppProtocol: "http"}},
		Endpoints: []computeapi.Endpoint{
			{Zone: "a", Cluster: "zone-a", Pod: "web-1", Ip: "10.0.0.1", Ready: true},
			{Zone: "a", Cluster: "zone-a", Pod: "web-2", Ip: "10.0.0.2"},
			{Zone: "b", Cluster: "zone-b", Pod: "web-3", Ip: "10.0.1.1", Ready: true},
		}}
	exposed := computeapi.ExposeStatus{Host: "web.example.com", Path: "/shop", Ingresses: 2,
		Addresses: []computeapi.IngressAddress{{Cluster: "zone-a", Zone: "a", Ip: "192.0.2.1"}, {Cluster: "zone-b", Zone: "b", Hostname: "lb.example.net"}}}
	for _, tc := range []struct {
		name   string
		w      computeapi.Workload
		eps    *computeapi.Endpoints
		err    error
		want   []string
		absent []string
	}{
		{"serving and exposed", app(exposed), serving, nil, []string{
			"Address: web.atoll-shop.svc.cluster.local",
			"Ports: http 8080/TCP (http)",
			"Endpoints: a 1/2 ready, b 1/1 ready",
			"Expose: web.example.com/shop (2 Ingresses)",
			"Expose addresses: 192.0.2.1 (zone-a), lb.example.net (zone-b)",
		}, nil},
		{"exposed, no address yet", app(computeapi.ExposeStatus{Host: "web.example.com", Path: "/"}), serving, nil,
			[]string{"Expose: web.example.com/ (0 Ingresses)", "Expose addresses: none yet"}, nil},
		{"not exposed", app(computeapi.ExposeStatus{}), serving, nil, []string{"Address: web.atoll-shop.svc.cluster.local"}, []string{"Expose"}},
		{"no ports", app(computeapi.ExposeStatus{}), &computeapi.Endpoints{}, nil, []string{"Address: none (no named container port)"}, []string{"Ports:", "Endpoints:"}},
		{"endpoints unreadable", app(computeapi.ExposeStatus{}), nil, errors.New("503 Unavailable"), []string{"Address: unknown: 503 Unavailable"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			describeServing(&b, tc.w, tc.eps, tc.err)
			got := squeeze(b.String())
			for _, want := range tc.want {
				if !strings.Contains(got, want) {
					t.Errorf("lacks %q:\n%s", want, got)
				}
			}
			for _, no := range tc.absent {
				if strings.Contains(got, no) {
					t.Errorf("has %q:\n%s", no, got)
				}
			}
		})
	}
}

// TestGetAppShowsServing: `atoll get app NAME` keeps its table and adds
// the App's address, endpoints per zone and exposure.
func TestGetAppShowsServing(t *testing.T) {
	cliEnv(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/projects/demo/workloads/{kind}/web", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, computeapi.Workload{Kind: api.KindApp, Metadata: computeapi.Metadata{Project: "demo", Name: "web", Generation: 1},
			Status: computeapi.WorkloadStatus{Phase: api.PhaseRunning, Desired: 1, Ready: 1,
				Expose: computeapi.ExposeStatus{Host: "web.example.com", Path: "/", Ingresses: 1, Addresses: []computeapi.IngressAddress{{Cluster: "zone-a", Zone: "a", Ip: "192.0.2.1"}}}}})
	})
	mux.HandleFunc("GET /v1/projects/demo/workloads/app/web/endpoints", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, computeapi.Endpoints{Address: "web.atoll-demo.svc.cluster.local", Ports: []computeapi.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}},
			Endpoints: []computeapi.Endpoint{{Zone: "a", Cluster: "zone-a", Pod: "web-1", Ip: "10.0.0.1", Ready: true}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	out, _, err := runCLI(t, "", "get", "app", "web", "--server", srv.URL, "--token", "good", "-p", "demo")
	if err != nil {
		t.Fatal(err)
	}
	got := squeeze(out)
	for _, want := range []string{"KIND NAME PHASE READY ZONES GEN AGE", "App web Running 1/1",
		"Address: web.atoll-demo.svc.cluster.local", "Ports: http 80/TCP", "Endpoints: a 1/1 ready",
		"Expose: web.example.com/ (1 Ingresses)", "Expose addresses: 192.0.2.1 (zone-a)"} {
		if !strings.Contains(got, want) {
			t.Errorf("get app lacks %q:\n%s", want, got)
		}
	}
}
