package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/computeapi"
)

// TestAdminSidecars drives `atoll admin sidecars` against a gateway that
// answers as the contract says: set sends the file as JSON, the reads
// print their tables.
func TestAdminSidecars(t *testing.T) {
	cliEnv(t)
	var sent []string
	v := computeapi.SidecarVersion{Version: 2, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), CreatedBy: "admin",
		Sidecars: []computeapi.ManagedSidecar{{Name: "log", Image: "log:2"}},
		Rollout:  computeapi.SidecarRollout{MaxUnavailable: 1, BakeSeconds: 60, OnFailure: "Pause"}}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/admin/sidecars", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sent = append(sent, string(b))
		writeJSON(w, 201, v)
	})
	mux.HandleFunc("GET /v1/admin/sidecars", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, v) })
	mux.HandleFunc("GET /v1/admin/sidecars/history", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, computeapi.SidecarVersionList{Items: []computeapi.SidecarVersion{v}})
	})
	mux.HandleFunc("GET /v1/admin/sidecars/status", func(w http.ResponseWriter, r *http.Request) {
		st := computeapi.SidecarStatus{Current: 2}
		st.Versions = append(st.Versions, struct {
			Version   int64 `json:"version"`
			Workloads int   `json:"workloads"`
		}{1, 3})
		st.Behind = append(st.Behind, struct {
			Kind    string `json:"kind"`
			Name    string `json:"name"`
			Project string `json:"project"`
			Version int64  `json:"version"`
		}{"App", "web", "demo", 1})
		st.Rollout.Version, st.Rollout.Phase, st.Rollout.Done, st.Rollout.Message = 2, "Paused", 4, "demo.app.web was not healthy"
		at := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
		st.Rollout.Updated = at.Add(5 * time.Minute)
		st.Rollout.Moving = append(st.Rollout.Moving, struct {
			From       int64     `json:"from"`
			Generation int64     `json:"generation"`
			Key        string    `json:"key"`
			ReadySince time.Time `json:"readySince,omitempty,omitzero"`
			Started    time.Time `json:"started"`
		}{From: 1, Generation: 7, Key: "demo.app.web", Started: at.Add(2 * time.Minute)},
			struct {
				From       int64     `json:"from"`
				Generation int64     `json:"generation"`
				Key        string    `json:"key"`
				ReadySince time.Time `json:"readySince,omitempty,omitzero"`
				Started    time.Time `json:"started"`
			}{From: 1, Generation: 3, Key: "demo.app.api", Started: at.Add(2 * time.Minute), ReadySince: at.Add(3 * time.Minute)})
		type zone = struct {
			Advanced   time.Time `json:"advanced,omitempty,omitzero"`
			Finished   time.Time `json:"finished,omitempty,omitzero"`
			Healthy    int       `json:"healthy,omitempty,omitzero"`
			Name       string    `json:"name"`
			Phase      string    `json:"phase"`
			ReadySince time.Time `json:"readySince,omitempty,omitzero"`
			Started    time.Time `json:"started,omitempty,omitzero"`
			Through    string    `json:"through,omitempty,omitzero"`
			Workloads  int       `json:"workloads,omitempty,omitzero"`
		}
		st.Rollout.Zones = []zone{
			{Name: "a", Phase: "Done", Workloads: 6, Healthy: 6, Started: at, ReadySince: at.Add(time.Minute), Finished: at.Add(2 * time.Minute)},
			{Name: "b", Phase: "Moving", Workloads: 6, Healthy: 2, Started: at.Add(2 * time.Minute), Through: "shop.app.web"},
			{Name: "c", Phase: "Pending"},
		}
		st.Control.Paused, st.Control.Reason = true, "checking"
		writeJSON(w, 200, st)
	})
	var ops []string
	for _, op := range []string{"pause", "resume", "abort"} {
		mux.HandleFunc("POST /v1/admin/sidecars/"+op, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			ops = append(ops, op+" "+strings.TrimSpace(string(b)))
			writeJSON(w, 200, computeapi.SidecarStatus{Current: 2})
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	out, _, err := runCLI(t, "sidecars:\n- name: log\n  image: log:2\n  resources: {requests: {cpu: 10m}}\n", "admin", "sidecars", "set", "-f", "-", "--server", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "version 2 set") {
		t.Errorf("set printed %q", out)
	}
	var got map[string]any
	if len(sent) != 1 || json.Unmarshal([]byte(sent[0]), &got) != nil {
		t.Fatalf("sent %q, want one JSON document", sent)
	}
	want := map[string]any{"sidecars": []any{map[string]any{"name": "log", "image": "log:2", "resources": map[string]any{"requests": map[string]any{"cpu": "10m"}}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"get"}, []string{"VERSION", "log=log:2", "onFailure=Pause"}},
		{[]string{"history"}, []string{"2026-01-02T03:04:05Z", "admin"}},
		{[]string{"status"}, []string{"current version: 2", "rollout of version 2: Paused, 4 done, 2 moving, 0 rolled back (as of 10:05:00)", "was not healthy",
			"control: paused, reason: checking",
			"ZONE  PHASE    HEALTHY  OPEN TO               STARTED   READY SINCE  FINISHED",
			"a     Done     6/6      all                   10:00:00  10:01:00     10:02:00",
			"b     Moving   2/6      through shop.app.web  10:02:00  -            -",
			"c     Pending  -        -                     -         -            -",
			"WORKLOAD      FROM  GENERATION  STARTED   HEALTH GATE",
			"demo.app.web  1     7           10:02:00  not ready",
			"demo.app.api  1     3           10:02:00  ready since 10:03:00",
			"behind the current version", "demo", "web"}},
		{[]string{"pause", "--reason", "why not"}, []string{"current version: 2"}},
		{[]string{"abort"}, []string{"current version: 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.args[0], func(t *testing.T) {
			out, _, err := runCLI(t, "", append([]string{"admin", "sidecars"}, append(tt.args, "--server", srv.URL)...)...)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if diff := cmp.Diff([]string{`pause {"reason":"why not"}`, `abort {}`}, ops); diff != "" {
		t.Errorf("operations sent (-want +got):\n%s", diff)
	}
}
