package admission_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
)

const (
	opApp    = `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"ops","name":"web"},"spec":{"replicas":2,"template":{"containers":[{"name":"a","image":"nginx"},{"name":"b","image":"envoy"}]}}}`
	opJobSet = `{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":"ops","name":"batch"},"spec":{"parallelism":2,"completions":10,"template":{"containers":[{"name":"work","image":"busybox"}]}}}`
	opPod    = `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"ops","name":"box"},"spec":{"template":{"containers":[{"name":"sh","image":"busybox"}]}}}`
)

func submit(t *testing.T, b *bus.Bus, doc string) *api.Workload {
	t.Helper()
	reply, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nil)
	if eb != nil {
		t.Fatalf("submit: %+v", eb)
	}
	w, err := api.Decode(reply.Data)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// operate sends an operation; it returns the workload replied, or the
// status code and error body.
func operate(t *testing.T, b *bus.Bus, op api.Operation) (*api.Workload, string, *api.ErrorBody) {
	t.Helper()
	body, _ := json.Marshal(op)
	reply, eb := call(t, b, bus.AdmissionOperate, body, nats.Header{admission.HeaderPrincipal: {"alice"}})
	if eb != nil {
		return nil, reply.Header.Get("Nats-Service-Error-Code"), eb
	}
	w, err := api.Decode(reply.Data)
	if err != nil {
		t.Fatalf("reply %s: %v", reply.Data, err)
	}
	return w, "200", nil
}

func stored(t *testing.T, b *bus.Bus, key string) *api.Workload {
	t.Helper()
	kv, err := b.KV(context.Background(), bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("stored %s: %v", key, err)
	}
	w, err := api.Decode(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func quotaCall(t *testing.T, b *bus.Bus, ep bus.Descriptor, v any) []byte {
	t.Helper()
	body, _ := json.Marshal(v)
	reply, err := b.NC.Request(ep.Subject(), body, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c := reply.Header.Get("Nats-Service-Error-Code"); c != "" {
		t.Fatalf("%s: %s %s", ep.Subject(), c, reply.Data)
	}
	return reply.Data
}

func used(t *testing.T, b *bus.Bus, project string) api.Demand {
	t.Helper()
	var l api.Ledger
	if err := json.Unmarshal(quotaCall(t, b, bus.QuotaGet, api.QuotaRelease{Project: project}), &l); err != nil {
		t.Fatal(err)
	}
	return l.Used(api.TierOnDemand)
}

func replicas(n int32) *int32 { return &n }

// eventsOf reads the event names published so far under atoll.evt.ops.>.
func eventsOf(t *testing.T, c jetstream.Consumer) []string {
	t.Helper()
	var out []string
	for {
		m, err := c.Next(jetstream.FetchMaxWait(300 * time.Millisecond))
		if err != nil {
			return out
		}
		out = append(out, m.Subject()[strings.LastIndex(m.Subject(), ".")+1:])
	}
}

func TestOperationsChangeTheStoredWorkload(t *testing.T) {
	b := region(t)
	ctx := context.Background()
	evs, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.EventRoot + ".ops.app.web.>"}})
	if err != nil {
		t.Fatal(err)
	}
	submit(t, b, opApp)
	key := api.Key("ops", api.KindApp, "web")
	ref := func(op string) api.Operation {
		return api.Operation{Project: "ops", Kind: api.KindApp, Name: "web", Op: op}
	}
	scale := func(n int32) api.Operation { o := ref(api.OpScale); o.Replicas = replicas(n); return o }
	restartB := ref(api.OpRestartContainer)
	restartB.Container = "b"

	var lastRestart time.Time
	steps := []struct {
		name       string
		op         api.Operation
		generation int64
		event      string // "" when nothing changes
		check      func(w *api.Workload) string
	}{
		{"pause", ref(api.OpPause), 2, api.EventPaused, func(w *api.Workload) string { return want(w.Control.Paused, "paused") }},
		{"pause again", ref(api.OpPause), 2, "", func(w *api.Workload) string { return want(w.Control.Paused, "still paused") }},
		{"resume", ref(api.OpResume), 3, api.EventResumed, func(w *api.Workload) string { return want(!w.Control.Paused, "not paused") }},
		{"resume again", ref(api.OpResume), 3, "", func(w *api.Workload) string { return want(!w.Control.Paused, "not paused") }},
		{"restart", ref(api.OpRestart), 4, api.EventRestarted, func(w *api.Workload) string {
			ok := !w.Control.RestartedAt.IsZero() && time.Since(w.Control.RestartedAt) < time.Minute
			lastRestart = w.Control.RestartedAt
			return want(ok, "restartedAt set to now")
		}},
		{"restart again", ref(api.OpRestart), 5, api.EventRestarted, func(w *api.Workload) string {
			return want(w.Control.RestartedAt.After(lastRestart), "a later restartedAt")
		}},
		{"restart container", restartB, 6, api.EventRestarted, func(w *api.Workload) string {
			_, a := w.Control.ContainerRestarts["a"]
			return want(!w.Control.ContainerRestarts["b"].IsZero() && !a, "a restart of b only")
		}},
		{"scale", scale(4), 7, api.EventScaled, func(w *api.Workload) string { return want(*w.Spec.(*api.AppSpec).Replicas == 4, "4 replicas") }},
		{"scale to the same", scale(4), 7, "", func(w *api.Workload) string { return want(*w.Spec.(*api.AppSpec).Replicas == 4, "4 replicas") }},
		{"stop", ref(api.OpStop), 8, api.EventStopped, func(w *api.Workload) string { return want(w.Control.Stopped, "stopped") }},
		{"stop again", ref(api.OpStop), 8, "", func(w *api.Workload) string { return want(w.Control.Stopped, "stopped") }},
		{"start", ref(api.OpStart), 9, api.EventStarted, func(w *api.Workload) string { return want(!w.Control.Stopped, "started") }},
		{"start again", ref(api.OpStart), 9, "", func(w *api.Workload) string { return want(!w.Control.Stopped, "started") }},
	}
	var wantEvents []string
	for _, st := range steps {
		got, code, eb := operate(t, b, st.op)
		if eb != nil {
			t.Fatalf("%s: %s %+v", st.name, code, eb)
		}
		s := stored(t, b, key)
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("%s: reply differs from the stored workload (-stored +reply):\n%s", st.name, diff)
		}
		if s.Metadata.Generation != st.generation {
			t.Errorf("%s: generation %d, want %d", st.name, s.Metadata.Generation, st.generation)
		}
		if msg := st.check(s); msg != "" {
			t.Errorf("%s: %s; control %+v", st.name, msg, s.Control)
		}
		if st.event != "" {
			wantEvents = append(wantEvents, st.event)
		}
	}
	// The spec is untouched but for the scale; the control is not in the spec.
	s := stored(t, b, key)
	if names := []string{s.Spec.PodTemplate().Containers[0].Image, s.Spec.PodTemplate().Containers[1].Image}; names[0] != "nginx" || names[1] != "envoy" {
		t.Errorf("images %v", names)
	}
	if diff := cmp.Diff(append([]string{api.EventAdmitted}, wantEvents...), eventsOf(t, evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func want(ok bool, what string) string {
	if ok {
		return ""
	}
	return "want " + what
}

func TestJobSetPauseAndScale(t *testing.T) {
	b := region(t)
	submit(t, b, opJobSet)
	op := api.Operation{Project: "ops", Kind: api.KindJobSet, Name: "batch", Op: api.OpPause}
	if w, code, eb := operate(t, b, op); eb != nil || !w.Control.Paused {
		t.Fatalf("pause: %s %+v", code, eb)
	}
	op.Op, op.Replicas = api.OpScale, replicas(5)
	w, code, eb := operate(t, b, op)
	if eb != nil {
		t.Fatalf("scale: %s %+v", code, eb)
	}
	if js := w.Spec.(*api.JobSetSpec); js.Parallelism != 5 || js.Completions != 10 || !w.Control.Paused || w.Metadata.Generation != 3 {
		t.Errorf("after scale: parallelism %d completions %d paused %v generation %d", js.Parallelism, js.Completions, w.Control.Paused, w.Metadata.Generation)
	}
	if u := used(t, b, "ops"); u.Pods != 5 {
		t.Errorf("usage %+v, want 5 pods held (a paused JobSet keeps its quota)", u)
	}
}

func TestOperationErrors(t *testing.T) {
	b := region(t)
	submit(t, b, opApp)
	submit(t, b, opPod)
	submit(t, b, opJobSet)
	stopped := strings.Replace(opApp, `"name":"web"`, `"name":"idle"`, 1)
	submit(t, b, stopped)
	if _, code, eb := operate(t, b, api.Operation{Project: "ops", Kind: api.KindApp, Name: "idle", Op: api.OpStop}); eb != nil {
		t.Fatalf("stop: %s %+v", code, eb)
	}
	sub, err := b.NC.SubscribeSync(bus.EventRoot + ".>")
	if err != nil {
		t.Fatal(err)
	}
	app := func(op string) api.Operation {
		return api.Operation{Project: "ops", Kind: api.KindApp, Name: "web", Op: op}
	}
	pod := func(op string) api.Operation {
		return api.Operation{Project: "ops", Kind: api.KindPod, Name: "box", Op: op}
	}
	withContainer := func(o api.Operation, c string) api.Operation { o.Container = c; return o }
	withReplicas := func(o api.Operation, n int32) api.Operation { o.Replicas = replicas(n); return o }
	tests := []struct {
		name  string
		op    api.Operation
		code  string // reply status
		body  string // error code
		field string // the field named, "" for none
		text  string // in the message
	}{
		{"unknown op", app("explode"), "400", "Invalid", "op", "unknown operation"},
		{"no op", app(""), "400", "Invalid", "op", "op is required"},
		{"unknown kind", api.Operation{Project: "ops", Kind: "Deployment", Name: "web", Op: api.OpPause}, "400", "Invalid", "kind", "unknown kind"},
		{"missing workload", api.Operation{Project: "ops", Kind: api.KindApp, Name: "nope", Op: api.OpPause}, "404", "NotFound", "", "not found"},
		{"unknown container", withContainer(app(api.OpRestartContainer), "sidecar"), "400", "Invalid", "container", `"sidecar"`},
		{"restart-container without one", app(api.OpRestartContainer), "400", "Invalid", "container", "needs the name"},
		{"pause a pod", pod(api.OpPause), "409", "Unsupported", "op", "cannot be paused"},
		{"resume a pod", pod(api.OpResume), "409", "Unsupported", "op", "cannot be paused"},
		{"scale a pod", withReplicas(pod(api.OpScale), 2), "409", "Unsupported", "op", "cannot be scaled"},
		{"scale without replicas", app(api.OpScale), "400", "Invalid", "replicas", "needs replicas"},
		{"negative scale", withReplicas(app(api.OpScale), -1), "400", "Invalid", "replicas", "not between"},
		{"parallelism over completions", withReplicas(api.Operation{Project: "ops", Kind: api.KindJobSet, Name: "batch", Op: api.OpScale}, 11), "400", "Invalid", "replicas", "completions (10)"},
		{"restart a stopped app", api.Operation{Project: "ops", Kind: api.KindApp, Name: "idle", Op: api.OpRestart}, "409", "Conflict", "", "is stopped"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, code, eb := operate(t, b, tc.op)
			if eb == nil {
				t.Fatal("accepted")
			}
			var fields []string
			for _, f := range eb.Fields {
				fields = append(fields, f.Field)
			}
			if code != tc.code || eb.Code != tc.body || !strings.Contains(eb.Message, tc.text) || (tc.field != "") != (len(fields) > 0) || tc.field != "" && fields[0] != tc.field {
				t.Errorf("got %s %s fields %v %q; want %s %s field %q containing %q", code, eb.Code, fields, eb.Message, tc.code, tc.body, tc.field, tc.text)
			}
		})
	}
	for _, raw := range []string{`{"project":"ops","kind":"App","name":"web","op":"pause","force":true}`, `not json`} {
		if reply, eb := call(t, b, bus.AdmissionOperate, []byte(raw), nil); eb == nil || reply.Header.Get("Nats-Service-Error-Code") != "400" {
			t.Errorf("%s: got %s %+v, want 400", raw, reply.Header.Get("Nats-Service-Error-Code"), eb)
		}
	}
	// Nothing was written, nothing announced.
	for key, gen := range map[string]int64{"ops.app.web": 1, "ops.pod.box": 1, "ops.jobset.batch": 1, "ops.app.idle": 2} {
		if w := stored(t, b, key); w.Metadata.Generation != gen || !w.Control.IsZero() && key != "ops.app.idle" {
			t.Errorf("%s: generation %d control %+v after rejected operations", key, w.Metadata.Generation, w.Control)
		}
	}
	if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("a rejected operation emitted %s", m.Subject)
	}
}

func TestOperationsHoldExactlyTheirQuota(t *testing.T) {
	b := region(t)
	// Every pod of these Apps counts 1 against a limit of 4.
	quotaCall(t, b, bus.QuotaSet, api.QuotaSet{Project: "ops", Tier: api.TierOnDemand, Limit: api.Limit{Pods: new(int64(4))}})
	submit(t, b, opApp) // 2 pods
	web := func(op string) api.Operation {
		return api.Operation{Project: "ops", Kind: api.KindApp, Name: "web", Op: op}
	}
	scale := func(n int32) api.Operation { o := web(api.OpScale); o.Replicas = replicas(n); return o }
	perPod := api.DemandOf(stored(t, b, "ops.app.web")).MilliCPU / 2

	if _, code, eb := operate(t, b, scale(4)); eb != nil {
		t.Fatalf("scale to 4: %s %+v", code, eb)
	}
	if u := used(t, b, "ops"); u.Pods != 4 || u.MilliCPU != 4*perPod {
		t.Errorf("after scale to 4: usage %+v", u)
	}
	// Beyond the limit: refused with the limit named, and nothing written.
	_, code, eb := operate(t, b, scale(5))
	if eb == nil || code != "409" || eb.Code != "QuotaExceeded" || eb.Quota == nil || eb.Quota.Resource != "pods" || eb.Quota.Limit != 4 {
		t.Fatalf("scale to 5: %s %+v", code, eb)
	}
	if w := stored(t, b, "ops.app.web"); *w.Spec.(*api.AppSpec).Replicas != 4 || w.Metadata.Generation != 2 {
		t.Errorf("refused scale wrote replicas %d generation %d", *w.Spec.(*api.AppSpec).Replicas, w.Metadata.Generation)
	}
	if u := used(t, b, "ops"); u.Pods != 4 {
		t.Errorf("after a refused scale: usage %+v", u)
	}
	// Stop gives everything back; another App takes 3 of the 4.
	if _, code, eb := operate(t, b, web(api.OpStop)); eb != nil {
		t.Fatalf("stop: %s %+v", code, eb)
	}
	if u := used(t, b, "ops"); u.Pods != 0 || u.MilliCPU != 0 || u.MemoryBytes != 0 {
		t.Errorf("after stop: usage %+v, want nothing", u)
	}
	other := strings.Replace(strings.Replace(opApp, `"name":"web"`, `"name":"other"`, 1), `"replicas":2`, `"replicas":3`, 1)
	submit(t, b, other)
	// An update of the stopped App keeps it stopped, holding nothing.
	bigger := strings.Replace(opApp, `"image":"nginx"`, `"image":"nginx:2"`, 1)
	if _, eb := call(t, b, bus.AdmissionUpdate, []byte(bigger), nil); eb != nil {
		t.Fatalf("update while stopped: %+v", eb)
	}
	if w := stored(t, b, "ops.app.web"); !w.Control.Stopped {
		t.Error("an update started the stopped App")
	}
	if u := used(t, b, "ops"); u.Pods != 3 {
		t.Errorf("after updating the stopped App: usage %+v, want the other App's 3 pods", u)
	}
	// Start needs its 4 pods again: refused while the other App holds 3.
	_, code, eb = operate(t, b, web(api.OpStart))
	if eb == nil || code != "409" || eb.Code != "QuotaExceeded" {
		t.Fatalf("start over quota: %s %+v", code, eb)
	}
	if w := stored(t, b, "ops.app.web"); !w.Control.Stopped {
		t.Error("a refused start was written")
	}
	// Scaled down while stopped, it fits, and start reserves exactly that.
	if _, code, eb := operate(t, b, scale(1)); eb != nil {
		t.Fatalf("scale while stopped: %s %+v", code, eb)
	}
	if u := used(t, b, "ops"); u.Pods != 3 {
		t.Errorf("a scale of a stopped App reserved: usage %+v", u)
	}
	if _, code, eb := operate(t, b, web(api.OpStart)); eb != nil {
		t.Fatalf("start: %s %+v", code, eb)
	}
	if u := used(t, b, "ops"); u.Pods != 4 || u.MilliCPU != 4*perPod {
		t.Errorf("after start: usage %+v, want 4 pods", u)
	}
}

func TestSubmitAndUpdateKeepTheControl(t *testing.T) {
	b := region(t)
	withControl := strings.Replace(opApp, `"spec":`, `"control":{"stopped":true},"spec":`, 1)
	reply, eb := call(t, b, bus.AdmissionSubmit, []byte(withControl), nil)
	if eb == nil || reply.Header.Get("Nats-Service-Error-Code") != "403" || len(eb.Fields) != 1 || eb.Fields[0].Field != "control" || eb.Fields[0].Code != api.CodeForbidden {
		t.Fatalf("tenant submit with control: %s %+v", reply.Header.Get("Nats-Service-Error-Code"), eb)
	}
	if k := keys(t, b); len(k) != 0 {
		t.Fatalf("refused submit wrote %v", k)
	}
	submit(t, b, opApp)
	for _, op := range []api.Operation{
		{Project: "ops", Kind: api.KindApp, Name: "web", Op: api.OpPause},
		{Project: "ops", Kind: api.KindApp, Name: "web", Op: api.OpRestartContainer, Container: "a"},
		{Project: "ops", Kind: api.KindApp, Name: "web", Op: api.OpRestartContainer, Container: "b"},
	} {
		if _, code, eb := operate(t, b, op); eb != nil {
			t.Fatalf("%s: %s %+v", op.Op, code, eb)
		}
	}
	// A retried submit of the original document is still not a conflict.
	if _, eb := call(t, b, bus.AdmissionSubmit, []byte(opApp), nil); eb != nil {
		t.Errorf("retried submit after an operation: %+v", eb)
	}
	// An update that drops container b keeps the pause and a's restart.
	onlyA := strings.Replace(opApp, `,{"name":"b","image":"envoy"}`, ``, 1)
	reply, eb = call(t, b, bus.AdmissionUpdate, []byte(onlyA), nil)
	if eb != nil {
		t.Fatal(eb)
	}
	w, _ := api.Decode(reply.Data)
	_, hasB := w.Control.ContainerRestarts["b"]
	if !w.Control.Paused || w.Control.ContainerRestarts["a"].IsZero() || hasB || w.Metadata.Generation != 5 {
		t.Errorf("after update: control %+v generation %d", w.Control, w.Metadata.Generation)
	}
	// The same update again changes nothing.
	reply, _ = call(t, b, bus.AdmissionUpdate, []byte(onlyA), nil)
	if w2, _ := api.Decode(reply.Data); w2 == nil || w2.Metadata.Generation != 5 {
		t.Errorf("repeated update bumped the generation: %s", reply.Data)
	}
	// A tenant's update cannot set the control either.
	withControl = strings.Replace(onlyA, `"spec":`, `"control":{"paused":false},"spec":`, 1)
	withControl = strings.Replace(withControl, `"paused":false`, `"stopped":true`, 1)
	if reply, eb := call(t, b, bus.AdmissionUpdate, []byte(withControl), nil); eb == nil || eb.Fields[0].Field != "control" {
		t.Errorf("tenant update with control: %s %+v", reply.Data, eb)
	}
	// A platform admin's may: it replaces the stored control.
	reply, eb = call(t, b, bus.AdmissionUpdate, []byte(withControl), nats.Header{admission.HeaderPlatformAdmin: {"true"}})
	if eb != nil {
		t.Fatalf("admin update with control: %+v", eb)
	}
	if w, _ := api.Decode(reply.Data); !w.Control.Stopped || w.Control.Paused || w.Metadata.Generation != 6 {
		t.Errorf("admin update: control %+v generation %d", w.Control, w.Metadata.Generation)
	}
}

// The autoscaler's own endpoint scales Apps and refuses anything else,
// whatever principal the request's headers name.
func TestAutoscaleOnlyScalesApps(t *testing.T) {
	b := region(t)
	submit(t, b, opApp)
	submit(t, b, opJobSet)
	tests := []struct {
		name string
		op   api.Operation
		want string // the reply's status code
	}{
		{"scale an App", api.Operation{Project: "ops", Kind: api.KindApp, Name: "web", Op: api.OpScale, Replicas: replicas(3)}, "200"},
		{"stop an App", api.Operation{Project: "ops", Kind: api.KindApp, Name: "web", Op: api.OpStop}, "403"},
		{"pause an App", api.Operation{Project: "ops", Kind: api.KindApp, Name: "web", Op: api.OpPause}, "403"},
		{"scale a JobSet", api.Operation{Project: "ops", Kind: api.KindJobSet, Name: "batch", Op: api.OpScale, Replicas: replicas(1)}, "403"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, _ := json.Marshal(tt.op)
			reply, eb := call(t, b, bus.AdmissionAutoscale, body, nats.Header{admission.HeaderPrincipal: {"alice"}, admission.HeaderPlatformAdmin: {"true"}})
			got := "200"
			if eb != nil {
				got = reply.Header.Get("Nats-Service-Error-Code")
			}
			if got != tt.want {
				t.Errorf("status %s (%s), want %s", got, reply.Data, tt.want)
			}
		})
	}
	if w := stored(t, b, "ops.app.web"); *w.Spec.(*api.AppSpec).Replicas != 3 || w.Control.Stopped || w.Control.Paused {
		t.Errorf("after the autoscaler's calls: replicas %d, control %+v; want 3, running", *w.Spec.(*api.AppSpec).Replicas, w.Control)
	}
}
