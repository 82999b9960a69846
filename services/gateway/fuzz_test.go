package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/debugstream"
	"atoll.dev/services/gateway"
)

// fuzzOps are the endpoints FuzzRequestDecoding aims at: the fuzzer picks
// one by index, and its suffix is appended to the path (a query, a tier,
// an action, or anything else), its header value is sent as header.
var fuzzOps = []fuzzOp{
	{"create", http.MethodPost, "/v1/projects/p/workloads", "Idempotency-Key", true},
	{"update", http.MethodPut, "/v1/projects/p/workloads/app/web", "Content-Type", true},
	{"scale", http.MethodPost, "/v1/projects/p/workloads/app/web/scale", "Content-Type", true},
	{"set-quota", http.MethodPut, "/v1/projects/p/quota/", "Content-Type", true},
	{"cluster-labels", http.MethodPatch, "/v1/clusters/zone-a-1/labels", "Content-Type", true},
	{"list", http.MethodGet, "/v1/projects/p/workloads", "Accept", false},
	{"events", http.MethodGet, "/v1/projects/p/workloads/app/web/events", "Last-Event-ID", false},
	{"logs", http.MethodGet, "/v1/projects/p/workloads/app/web/logs", "Accept", false},
	{"operate", http.MethodPost, "/v1/projects/p/workloads/app/web/", "Content-Type", false},
	{"cordon", http.MethodPost, "/v1/clusters/zone-a-1/", "Content-Type", false},
	{"get", http.MethodGet, "/v1/projects/p/workloads/", "Accept", false},
}

// fuzzOp is one endpoint of the fuzz test.
type fuzzOp struct {
	name, method string
	// base is the path; one ending in "/" takes its last segment from the suffix.
	base string
	// header is the header the fuzzed header value is sent as.
	header string
	// bodyDecoded says the endpoint decodes the request body.
	bodyDecoded bool
}

// fuzzMaxBody is the gateway's body cap in the fuzz test.
const fuzzMaxBody = 16 << 10

// FuzzRequestDecoding sends fuzzed requests, as an authenticated platform
// admin, through the gateway's real handler to the endpoints that decode
// input, with region-service stand-ins answering on the bus. It asserts
// that no request panics or fails with a 5xx, that every error is a JSON
// Error with a code, that input which is invalid on its face is refused
// with a 4xx, and that what succeeds has the shape of the contract.
func FuzzRequestDecoding(f *testing.F) {
	// The stand-ins store nothing, so no write ever shows in the cache: a
	// microsecond's wait for it sends every write to the gateway's answer
	// without it (the stored document, rendered) at once.
	g := newTestGateway(f, gateway.Config{RatePerSecond: 1e9, Burst: 1 << 30, MaxBodyBytes: fuzzMaxBody, ReadYourWrites: time.Microsecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	startRegionStandIns(ctx, f, g.Bus)
	seedFuzzRegion(ctx, f, g)
	h := g.GW.Handler()
	// Audit records are stored before the handler returns, so a request's
	// record is in audits when ServeHTTP is done.
	audits := make(chan *nats.Msg, 64)
	sub, err := g.Bus.NC.ChanSubscribe(bus.AuditRoot+".>", audits)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = sub.Unsubscribe() })

	f.Fuzz(func(t *testing.T, op uint8, suffix string, body []byte, header string) {
		o := fuzzOps[int(op)%len(fuzzOps)]
		req, ok := rawRequest(o.method, o.base+suffix, g.Admin, o.header, header, body)
		if !ok {
			return // net/http's server would refuse it before any handler
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		rec := &hangUpRecorder{ResponseRecorder: httptest.NewRecorder(), hangUp: rcancel}
		h.ServeHTTP(rec, req.WithContext(rctx))
		if rctx.Err() != nil && !rec.flushed {
			t.Fatalf("%s %s: no answer within 10s", o.method, o.base+suffix)
		}
		checkFuzzResponse(t, o, req, body, rec.ResponseRecorder)
		checkAuditSubjects(t, audits, o.method+" "+o.base+suffix)
	})
}

// rawRequest builds the request as net/http's server would read it from
// the wire; ok is false when the server would refuse it before routing.
func rawRequest(method, target, token, header, value string, body []byte) (*http.Request, bool) {
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, false
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n", method, target, token, len(body))
	if value != "" {
		fmt.Fprintf(&b, "%s: %s\r\n", header, value)
	}
	b.WriteString("\r\n")
	b.Write(body)
	req, err := http.ReadRequest(bufio.NewReader(&b))
	if err != nil || req.URL.Path == "" || req.URL.Path[0] != '/' {
		return nil, false
	}
	req.RemoteAddr = "127.0.0.1:40000"
	return req, true
}

// hangUpRecorder is a client that reads an answer up to the first flush of
// a stream (events, logs) and hangs up, so that streams end at once.
type hangUpRecorder struct {
	*httptest.ResponseRecorder
	hangUp  context.CancelFunc
	flushed bool
}

// Flush records the flush and hangs up.
func (r *hangUpRecorder) Flush() {
	r.ResponseRecorder.Flush()
	r.flushed = true
	r.hangUp()
}

// fuzzTypedParams are the query parameters of each endpoint that the
// contract types as integers or booleans.
var fuzzTypedParams = map[string]struct{ ints, bools []string }{
	"list":   {ints: []string{"limit"}},
	"events": {ints: []string{"after"}, bools: []string{"watch"}},
	"logs":   {ints: []string{"sinceSeconds", "tail"}, bools: []string{"follow"}},
}

// checkFuzzResponse asserts the properties of the answer to req.
func checkFuzzResponse(t *testing.T, o fuzzOp, req *http.Request, body []byte, rec *httptest.ResponseRecorder) {
	t.Helper()
	status, got, ct := rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type")
	// The header as the server read it (textproto trims the value).
	header := req.Header.Get(o.header)
	// intended: the request reaches the endpoint o names, not another route.
	rest, intended := strings.CutPrefix(req.URL.EscapedPath(), o.base)
	if strings.HasSuffix(o.base, "/") {
		intended = intended && rest != "" && !strings.Contains(rest, "/")
	} else {
		intended = intended && rest == ""
	}
	desc := fmt.Sprintf("%s %s (body %d bytes, %s %q): %d %s %.300s", o.name, req.URL, len(body), o.header, header, status, ct, got)
	t.Log(desc)

	if status >= 500 {
		t.Fatalf("server error: %s", desc)
	}
	if status >= 400 {
		var e computeapi.Error
		if !strings.HasPrefix(ct, "application/json") || json.Unmarshal(got, &e) != nil || e.Code == "" {
			t.Fatalf("error is not a JSON Error with a code: %s", desc)
		}
	} else if strings.HasPrefix(ct, "application/json") && !json.Valid(got) {
		t.Fatalf("success with invalid JSON: %s", desc)
	}
	wantRefused := func(why string) {
		t.Helper()
		if status < 400 || status >= 500 {
			t.Fatalf("%s, yet not refused with a 4xx: %s", why, desc)
		}
	}
	if !intended {
		return
	}
	if o.bodyDecoded && len(body) <= fuzzMaxBody && !json.Valid(body) {
		wantRefused("the body is not JSON")
	}
	q := req.URL.Query()
	for _, p := range fuzzTypedParams[o.name].ints {
		if v := q.Get(p); v != "" && !isInt(v) {
			wantRefused(p + " is not an integer")
		}
	}
	for _, p := range fuzzTypedParams[o.name].bools {
		if _, err := strconv.ParseBool(q.Get(p)); q.Get(p) != "" && err != nil {
			wantRefused(p + " is not a boolean")
		}
	}
	switch o.name {
	case "list":
		if v := q.Get("continue"); v != "" {
			if k, err := base64.RawURLEncoding.DecodeString(v); err != nil || !strings.HasPrefix(string(k), "p.") {
				wantRefused("continue is not a token of project p")
			}
		}
		if status == http.StatusOK {
			var l computeapi.WorkloadList
			if err := json.Unmarshal(got, &l); err != nil {
				t.Fatalf("list: %v: %s", err, desc)
			}
			limit, err := strconv.Atoi(q.Get("limit"))
			if err != nil || limit <= 0 || limit > 1000 {
				limit = 100
			}
			if len(l.Items) > limit {
				t.Fatalf("list: %d items for limit %d: %s", len(l.Items), limit, desc)
			}
			for _, it := range l.Items {
				if it.Metadata.Project != "p" {
					t.Fatalf("list of p returned an item of %q: %s", it.Metadata.Project, desc)
				}
			}
		}
	case "events":
		if v := strings.TrimSpace(header); header != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				wantRefused("Last-Event-ID is not an event id")
			}
		}
	case "logs":
		for _, p := range []string{"sinceSeconds", "tail"} {
			if n, err := strconv.ParseInt(q.Get(p), 10, 64); err == nil && n < 0 {
				wantRefused(p + " is negative")
			}
		}
	case "scale":
		var s struct {
			Replicas *int32 `json:"replicas"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if dec.Decode(&s) == nil && !dec.More() && s.Replicas != nil && (*s.Replicas < 0 || *s.Replicas > api.MaxReplicas) {
			wantRefused("replicas are out of range")
		}
	case "create":
		if status == http.StatusCreated {
			var w computeapi.Workload
			if err := json.Unmarshal(got, &w); err != nil || w.Metadata.Project != "p" || w.Metadata.Generation < 1 || w.Metadata.Uid == "" {
				t.Fatalf("created workload: %v: %s", err, desc)
			}
		}
	case "set-quota":
		if status == http.StatusOK {
			var qv computeapi.Quota
			if err := json.Unmarshal(got, &qv); err != nil || qv.Project != "p" || len(qv.Tiers) != len(api.Tiers) {
				t.Fatalf("quota: %v: %s", err, desc)
			}
		}
	case "cluster-labels":
		if status == http.StatusOK {
			var c computeapi.Cluster
			if err := json.Unmarshal(got, &c); err != nil || c.Name != "zone-a-1" {
				t.Fatalf("cluster: %v: %s", err, desc)
			}
		}
	}
}

func isInt(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// checkAuditSubjects asserts that the audit records published so far went
// to well-formed subjects: atoll.audit.<project>.<verb>, two subject tokens.
func checkAuditSubjects(t *testing.T, audits <-chan *nats.Msg, request string) {
	t.Helper()
	for {
		select {
		case m := <-audits:
			tokens := strings.Split(strings.TrimPrefix(m.Subject, bus.AuditRoot+"."), ".")
			if len(tokens) != 2 || !subjectToken(tokens[0]) || !subjectToken(tokens[1]) {
				t.Fatalf("%s: audit record on subject %q, not %s.<project>.<verb>: %s", request, m.Subject, bus.AuditRoot, m.Data)
			}
		default:
			return
		}
	}
}

// subjectToken says whether s is one literal token of a NATS subject.
func subjectToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n")
}

// seedFuzzRegion stores the workload p/app/web with its status and the
// member cluster zone-a-1, as admission and the aggregator would, and
// waits until the gateway serves them.
func seedFuzzRegion(ctx context.Context, tb testing.TB, g *testGateway) {
	tb.Helper()
	w, st := benchApp("p", 1)
	w.Metadata.Name, st.Key = "web", "p.app.web"
	put := func(bucket, key string, v any) {
		kv, err := g.Bus.KV(ctx, bucket)
		if err != nil {
			tb.Fatal(err)
		}
		b, _ := json.Marshal(v)
		if _, err := kv.Put(ctx, key, b); err != nil {
			tb.Fatal(err)
		}
	}
	put(bus.BucketStatus, st.Key, st)
	put(bus.BucketWorkloads, w.Key(), w)
	put(bus.BucketClusters, "zone-a-1", fuzzCluster())
	require.EventuallyWithT(tb, func(c *assert.CollectT) {
		for _, path := range []string{"/v1/projects/p/workloads/app/web", "/v1/clusters/zone-a-1"} {
			resp, b := g.do(c, "GET", path, g.Admin, nil)
			assert.Equal(c, http.StatusOK, resp.StatusCode, "GET %s: %s", path, b)
		}
	}, 10*time.Second, 20*time.Millisecond)
}

func fuzzCluster() *api.ClusterInfo {
	return &api.ClusterInfo{Name: "zone-a-1", Zone: "a", Healthy: true, LastSeen: time.Now().UTC(),
		Labels: map[string]string{api.NodeLabelZone: "a"},
		Pools: map[string]api.PoolInfo{"general": {Nodes: 10, ReadyNodes: 10, Tier: string(api.TierOnDemand),
			Allocatable: api.Quantities{MilliCPU: 80000, MemoryBytes: 320 << 30}, AllocatablePods: 1100}},
		Updated: time.Now().UTC()}
}

// startRegionStandIns registers, on the bus, stand-ins for the region
// services the gateway calls: admission (submit, update, operate), quota
// (set, get) and the aggregator's cluster operations and debug streams.
// Each answers a request as the real service does: it decodes, defaults
// and validates with libs/api and replies with the document the service
// would have stored, or with the service's error for a refused request
// (tenant policy and quota reservations are not checked: the caller is a
// platform admin and no limit is set). They write nothing: the fuzz test
// is about the gateway's decoding.
func startRegionStandIns(ctx context.Context, tb testing.TB, b *bus.Bus) {
	tb.Helper()
	workloads, err := b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := micro.AddService(b.NC, micro.Config{Name: "fuzz-region-stand-ins", Version: "0.0.1"})
	if err != nil {
		tb.Fatal(err)
	}
	var handlers sync.WaitGroup
	tb.Cleanup(func() { _ = svc.Stop(); handlers.Wait() })
	q := &quotaStandIn{limits: map[string]map[api.Tier]api.Limit{}}
	for _, e := range []struct {
		service, verb string
		h             micro.HandlerFunc
	}{
		{"admission", "submit", func(r micro.Request) { admit(r, stored(workloads), false) }},
		{"admission", "update", func(r micro.Request) { admit(r, stored(workloads), true) }},
		{"admission", "operate", func(r micro.Request) { operate(r, stored(workloads)) }},
		{"quota", "set", q.set},
		{"quota", "get", q.get},
		{"aggregator", "cluster", clusterOp},
	} {
		if err := svc.AddEndpoint(e.service+"-"+e.verb, bus.Concurrent(16, &handlers, e.h), micro.WithEndpointSubject(bus.RequestSubject(e.service, e.verb))); err != nil {
			tb.Fatal(err)
		}
	}
	debug := debugstream.NewServer(b.NC, noPods{}, debugstream.ServerOptions{Name: "fuzz-debugstream", Logger: slog.New(slog.DiscardHandler)})
	if err := debug.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(debug.Stop)
	if err := b.NC.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// stored reads a workload as admission finds it in the workloads bucket.
func stored(kv jetstream.KeyValue) func(key string) (*api.Workload, bool) {
	return func(key string) (*api.Workload, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := kv.Get(ctx, key)
		if err != nil {
			return nil, false
		}
		w, err := api.Decode(e.Value())
		return w, err == nil
	}
}

// refuse answers as admission does: 422 Invalid with every field problem
// (403 Forbidden when one is), 400 for a document that does not decode.
func refuse(r micro.Request, err error) {
	var fe api.FieldErrors
	if !errors.As(err, &fe) || len(fe) == 0 {
		_ = bus.RespondError(r, api.StatusBadRequest, err.Error(), api.ErrorBody{Code: "BadRequest", Message: err.Error()})
		return
	}
	status, code := api.StatusUnprocessable, "Invalid"
	for _, f := range fe {
		if f.Code == api.CodeForbidden {
			status, code = api.StatusForbidden, "Forbidden"
		}
	}
	_ = bus.RespondError(r, status, fe.Error(), api.ErrorBody{Code: code, Message: fe.Error(), Fields: fe})
}

// admit is admission's submit and update: the document defaulted and
// validated; a submit is answered as generation 1, or with the stored
// workload when it repeats it (409 when it differs); an update as the
// stored generation + 1 (404 when there is none).
func admit(r micro.Request, cur func(string) (*api.Workload, bool), update bool) {
	w, err := api.Decode(r.Data())
	if err != nil {
		refuse(r, err)
		return
	}
	w.Spec.Default()
	if fe := api.Validate(w); len(fe) > 0 {
		refuse(r, fe)
		return
	}
	now := time.Now().UTC()
	old, exists := cur(w.Key())
	switch {
	case update && !exists:
		_ = bus.RespondError(r, api.StatusNotFound, "not found", api.ErrorBody{Code: "NotFound", Message: w.String() + " not found"})
		return
	case update:
		w.Metadata.Generation, w.Metadata.UID, w.Metadata.Created, w.Metadata.Updated, w.Control = old.Metadata.Generation+1, old.Metadata.UID, old.Metadata.Created, now, old.Control
	case exists:
		a, _ := json.Marshal(w.Spec)
		b, _ := json.Marshal(old.Spec)
		if !bytes.Equal(a, b) {
			_ = bus.RespondError(r, api.StatusConflict, "already exists", api.ErrorBody{Code: "AlreadyExists", Message: w.String() + " already exists with a different spec; update it instead"})
			return
		}
		w = old
	default:
		w.Metadata.Generation, w.Metadata.UID, w.Metadata.Created, w.Metadata.Updated = 1, "uid-"+w.Key(), now, now
	}
	_ = bus.RespondJSON(r, w)
}

// operate is admission's operate: the operation applied to the stored workload.
func operate(r micro.Request, cur func(string) (*api.Workload, bool)) {
	var op api.Operation
	dec := json.NewDecoder(bytes.NewReader(r.Data()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&op); err != nil {
		refuse(r, fmt.Errorf("operation: %w", err))
		return
	}
	if fe := op.Validate(); len(fe) > 0 {
		refuse(r, fe)
		return
	}
	w, ok := cur(api.Key(op.Project, op.Kind, op.Name))
	if !ok {
		_ = bus.RespondError(r, api.StatusNotFound, "not found", api.ErrorBody{Code: "NotFound", Message: op.String() + ": not found"})
		return
	}
	switch op.Op {
	case api.OpPause:
		w.Control.Paused = true
	case api.OpResume:
		w.Control.Paused = false
	case api.OpStop:
		w.Control.Stopped = true
	case api.OpStart:
		w.Control.Stopped = false
	case api.OpRestart:
		w.Control.RestartedAt = time.Now().UTC()
	case api.OpRestartContainer:
		w.Control.ContainerRestarts = map[string]time.Time{op.Container: time.Now().UTC()}
	case api.OpScale:
		app, ok := w.Spec.(*api.AppSpec)
		if !ok {
			refuse(r, api.FieldErrors{{Field: "replicas", Code: api.CodeInvalid, Reason: "only Apps scale here"}})
			return
		}
		app.Replicas = op.Replicas
	}
	w.Metadata.Generation++
	_ = bus.RespondJSON(r, w)
}

// quotaStandIn keeps limits per project and tier, as the quota service's ledger does.
type quotaStandIn struct {
	mu     sync.Mutex
	limits map[string]map[api.Tier]api.Limit // mu must be held
}

func (q *quotaStandIn) set(r micro.Request) {
	var req api.QuotaSet
	if err := json.Unmarshal(r.Data(), &req); err != nil {
		_ = bus.RespondError(r, api.StatusBadRequest, "malformed request", api.ErrorBody{Code: "BadRequest", Message: err.Error()})
		return
	}
	if !api.IsDNSLabel(req.Project) {
		_ = bus.RespondError(r, api.StatusUnprocessable, "invalid project", api.ErrorBody{Code: "Invalid", Message: "project is not a DNS label"})
		return
	}
	switch req.Tier {
	case api.TierReserved, api.TierOnDemand, api.TierPreemptible:
	default:
		_ = bus.RespondError(r, api.StatusUnprocessable, "invalid tier", api.ErrorBody{Code: "Invalid", Message: fmt.Sprintf("tier %q", req.Tier)})
		return
	}
	q.mu.Lock()
	if q.limits[req.Project] == nil {
		q.limits[req.Project] = map[api.Tier]api.Limit{}
	}
	q.limits[req.Project][req.Tier] = req.Limit
	q.mu.Unlock()
	_ = bus.RespondJSON(r, map[string]bool{"set": true})
}

func (q *quotaStandIn) get(r micro.Request) {
	var req api.QuotaRelease
	if err := json.Unmarshal(r.Data(), &req); err != nil {
		_ = bus.RespondError(r, api.StatusBadRequest, "malformed request", api.ErrorBody{Code: "BadRequest", Message: err.Error()})
		return
	}
	q.mu.Lock()
	l := &api.Ledger{Project: req.Project, Limits: map[api.Tier]api.Limit{}}
	for t, lim := range q.limits[req.Project] {
		l.Limits[t] = lim
	}
	q.mu.Unlock()
	_ = bus.RespondJSON(r, l)
}

// clusterOp is the aggregator's cluster endpoint on zone-a-1's inventory.
func clusterOp(r micro.Request) {
	var op api.ClusterOp
	dec := json.NewDecoder(bytes.NewReader(r.Data()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&op); err != nil {
		_ = bus.RespondError(r, api.StatusBadRequest, err.Error(), api.ErrorBody{Code: "BadRequest", Message: err.Error()})
		return
	}
	if fe := op.Validate(); len(fe) > 0 {
		_ = bus.RespondError(r, api.StatusBadRequest, fe.Error(), api.ErrorBody{Code: "Invalid", Message: fe.Error(), Fields: fe})
		return
	}
	if op.Cluster != "zone-a-1" {
		_ = bus.RespondError(r, api.StatusNotFound, "no such cluster", api.ErrorBody{Code: "NotFound", Message: "no cluster " + op.Cluster})
		return
	}
	ci := fuzzCluster()
	switch op.Op {
	case api.ClusterOpCordon:
		ci.Cordoned, ci.Admin.Cordoned = true, true
	case api.ClusterOpLabels:
		ci.Admin.Labels = map[string]string{}
		for k, v := range op.SetLabels {
			ci.Admin.Labels[k], ci.Labels[k] = v, v
		}
		for _, k := range op.RemoveLabels {
			delete(ci.Labels, k)
		}
	}
	ci.Admin.By, ci.Admin.At = op.Principal, time.Now().UTC()
	_ = bus.RespondJSON(r, ci)
}

// noPods is the member-cluster side of a region without member clusters:
// no workload has Pods.
type noPods struct{}

func (noPods) Logs(_ context.Context, req debugstream.LogRequest) ([]debugstream.LogSource, error) {
	return nil, debugstream.Errorf(http.StatusNotFound, "%s %s/%s has no Pods in any member cluster", req.Kind, req.Project, req.Name)
}

func (noPods) Exec(_ context.Context, req debugstream.ExecRequest) (debugstream.ExecTarget, error) {
	return debugstream.ExecTarget{}, debugstream.Errorf(http.StatusNotFound, "%s %s/%s has no Pods in any member cluster", req.Kind, req.Project, req.Name)
}

// TestEventReadsLeaveNoConsumers reads and watches a workload's events
// more times than a stream may have consumers (nats-server's default is
// 1,000 per stream): each read must give its consumer back, or reads start
// to fail for every workload of the region.
func TestEventReadsLeaveNoConsumers(t *testing.T) {
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1e9, Burst: 1 << 30})
	seedFuzzRegion(t.Context(), t, g)
	h := g.GW.Handler()
	for i := range 1100 {
		path := "/v1/projects/p/workloads/app/web/events"
		if i%2 == 1 {
			path += "?watch=true" // answered up to its first flush, then hung up
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+g.Admin)
		rec := &hangUpRecorder{ResponseRecorder: httptest.NewRecorder(), hangUp: cancel}
		h.ServeHTTP(rec, req)
		cancel()
		if rec.Code != http.StatusOK {
			t.Fatalf("%s, request %d: %d %s", path, i+1, rec.Code, rec.Body)
		}
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err := g.Bus.JS.Stream(t.Context(), bus.StreamEvents)
		require.NoError(c, err, "events stream")
		info, err := s.Info(t.Context())
		require.NoError(c, err, "events stream info")
		assert.LessOrEqual(c, info.State.Consumers, 10, "consumers left on %s after 1,100 reads", bus.StreamEvents)
	}, 10*time.Second, 20*time.Millisecond)
}
