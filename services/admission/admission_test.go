package admission_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/api/apitest"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
	"atoll.dev/services/quota"
)

func region(t *testing.T) *bus.Bus {
	t.Helper()
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	q := quota.New(b, slog.Default(), quota.Ample())
	a := admission.New(b, slog.Default(), nil)
	for _, s := range []interface {
		Start(context.Context) error
		Stop() error
	}{q, a} {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop() })
	}
	return b
}

// call sends a request the way the gateway will.
func call(t *testing.T, b *bus.Bus, ep bus.Descriptor, body []byte, hdr nats.Header) (*nats.Msg, *api.ErrorBody) {
	t.Helper()
	msg := &nats.Msg{Subject: ep.Subject(), Data: body, Header: hdr}
	reply, err := b.NC.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Header.Get("Nats-Service-Error-Code") == "" {
		return reply, nil
	}
	var eb api.ErrorBody
	if err := json.Unmarshal(reply.Data, &eb); err != nil {
		t.Fatalf("error body %q: %v", reply.Data, err)
	}
	return reply, &eb
}

func keys(t *testing.T, b *bus.Bus) []string {
	kv, err := b.KV(context.Background(), bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	l, err := kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out
}

func TestBadSpecsAreRejectedAndNothingIsWritten(t *testing.T) {
	b := region(t)
	sub, err := b.NC.SubscribeSync(bus.EventRoot + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if len(apitest.BadSpecs) < 15 {
		t.Fatalf("only %d bad specs", len(apitest.BadSpecs))
	}
	for _, tc := range apitest.BadSpecs {
		t.Run(tc.Name, func(t *testing.T) {
			reply, eb := call(t, b, bus.AdmissionSubmit, []byte(tc.Doc), nil)
			if eb == nil {
				t.Fatalf("accepted: %s", reply.Data)
			}
			if code := reply.Header.Get("Nats-Service-Error-Code"); code != "422" && code != "400" {
				t.Errorf("status %s, want 422", code)
			}
			found := false
			for _, f := range eb.Fields {
				found = found || f.Field == tc.Field && f.Code == tc.Code && f.Reason != ""
			}
			if !found {
				t.Errorf("fields %+v lack %s/%s", eb.Fields, tc.Field, tc.Code)
			}
		})
	}
	policy := []struct{ name, doc, field string }{
		{"privileged", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","privileged":true}]}}}`, "spec.template.containers[0].privileged"},
		{"host network", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"hostNetwork":true,"containers":[{"name":"a","image":"x"}]}}}`, "spec.template.hostNetwork"},
		{"host path", `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"p","name":"w"},"spec":{"template":{"volumes":[{"name":"root","hostPath":"/"}],"containers":[{"name":"a","image":"x"}]}}}`, "spec.template.volumes[0].hostPath"},
		{"own sidecar", `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"p","name":"w"},"spec":{"template":{"sidecars":[{"name":"s","image":"y"}],"containers":[{"name":"a","image":"x"}]}}}`, "spec.template.sidecars"},
		{"daemon", `{"apiVersion":"atoll.dev/v1","kind":"Daemon","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "kind"},
	}
	for _, tc := range policy {
		t.Run(tc.name, func(t *testing.T) {
			reply, eb := call(t, b, bus.AdmissionSubmit, []byte(tc.doc), nil)
			if eb == nil || reply.Header.Get("Nats-Service-Error-Code") != "403" || len(eb.Fields) == 0 || eb.Fields[0].Field != tc.field {
				t.Errorf("got %s %+v, want 403 on %s", reply.Header.Get("Nats-Service-Error-Code"), eb, tc.field)
			}
		})
	}
	scheduling := []struct{ name, placement, field string }{
		{"toleration without key", `{"tolerations":[{"operator":"Exists"}]}`, "spec.placement.tolerations[0].key"},
		{"reserved tier selector", `{"nodeSelector":{"atoll.dev/tier":"Reserved"}}`, "spec.placement.nodeSelector.atoll.dev/tier"},
		{"control-plane selector", `{"nodeSelector":{"node-role.kubernetes.io/control-plane":""}}`, "spec.placement.nodeSelector.node-role.kubernetes.io/control-plane"},
		{"node condition toleration", `{"tolerations":[{"key":"node.kubernetes.io/unschedulable","operator":"Exists"}]}`, "spec.placement.tolerations[0].key"},
		{"reserved tier toleration", `{"tolerations":[{"key":"atoll.dev/tier","value":"Reserved"}]}`, "spec.placement.tolerations[0].key"},
	}
	for _, tc := range scheduling {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"placement":` + tc.placement + `,"template":{"containers":[{"name":"a","image":"x"}]}}}`
			reply, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nil)
			if eb == nil || reply.Header.Get("Nats-Service-Error-Code") != "422" || len(eb.Fields) != 1 || eb.Fields[0].Field != tc.field {
				t.Errorf("got %s %+v, want 422 on %s", reply.Header.Get("Nats-Service-Error-Code"), eb, tc.field)
			}
		})
	}
	if k := keys(t, b); len(k) != 0 {
		t.Errorf("rejected specs wrote %v", k)
	}
	if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("rejected specs emitted %s", m.Subject)
	}
}

func TestPlatformAdminMayRunHostWorkloads(t *testing.T) {
	b := region(t)
	doc := `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"infra","name":"agent"},"spec":{"template":{"hostNetwork":true,"containers":[{"name":"a","image":"x","privileged":true}]}}}`
	if _, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nats.Header{admission.HeaderPlatformAdmin: {"true"}}); eb != nil {
		t.Fatalf("platform admin rejected: %+v", eb)
	}
	daemon := `{"apiVersion":"atoll.dev/v1","kind":"Daemon","metadata":{"project":"infra","name":"agent"},"spec":{"template":{"hostNetwork":true,"containers":[{"name":"a","image":"x"}]}}}`
	if _, eb := call(t, b, bus.AdmissionSubmit, []byte(daemon), nats.Header{admission.HeaderPlatformAdmin: {"true"}}); eb != nil {
		t.Fatalf("platform admin's Daemon rejected: %+v", eb)
	}
}

func TestSubmitDefaultsInjectsAndIsIdempotent(t *testing.T) {
	b := region(t)
	ctx := context.Background()
	events, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"web"},"spec":{"replicas":2,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`
	reply, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nil)
	if eb != nil {
		t.Fatal(eb)
	}
	w, err := api.Decode(reply.Data)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := w.Spec.PodTemplate()
	if tier, _ := w.Spec.Scheduling(); tier != api.TierOnDemand {
		t.Errorf("tier %q, want OnDemand by default", tier)
	}
	if tmpl.Containers[0].Resources.Requests.CPU != api.DefaultCPU || len(tmpl.Sidecars) != 1 || tmpl.Sidecars[0].Name != "atoll-log-shipper" {
		t.Errorf("defaults or injection missing: %+v", tmpl)
	}
	if w.Metadata.Generation != 1 || w.Metadata.UID == "" {
		t.Errorf("metadata %+v", w.Metadata)
	}
	// A retried submit returns the same workload.
	reply2, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nil)
	if eb != nil {
		t.Fatalf("retried submit: %+v", eb)
	}
	w2, _ := api.Decode(reply2.Data)
	if w2.Metadata.UID != w.Metadata.UID {
		t.Error("retried submit created a new workload")
	}
	// A different spec under the same name conflicts.
	other := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"web"},"spec":{"replicas":5,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`
	if r, eb := call(t, b, bus.AdmissionSubmit, []byte(other), nil); eb == nil || r.Header.Get("Nats-Service-Error-Code") != "409" {
		t.Errorf("conflicting submit: %+v", eb)
	}
	// Update bumps the generation.
	reply3, eb := call(t, b, bus.AdmissionUpdate, []byte(other), nil)
	if eb != nil {
		t.Fatal(eb)
	}
	w3, _ := api.Decode(reply3.Data)
	if w3.Metadata.Generation != 2 || *w3.Spec.(*api.AppSpec).Replicas != 5 {
		t.Errorf("update: generation %d", w3.Metadata.Generation)
	}
	del, _ := json.Marshal(api.WorkloadRef{Project: "p", Kind: "App", Name: "web"})
	if _, eb := call(t, b, bus.AdmissionDelete, del, nil); eb != nil {
		t.Fatal(eb)
	}
	if _, eb := call(t, b, bus.AdmissionDelete, del, nil); eb == nil || eb.Code != "NotFound" {
		t.Errorf("second delete: %+v", eb)
	}
	var got []string
	for range 3 {
		m, err := events.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Subject())
	}
	want := []string{"atoll.evt.p.app.web.admitted", "atoll.evt.p.app.web.updated", "atoll.evt.p.app.web.deleted"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if _, err := events.Next(jetstream.FetchMaxWait(300 * time.Millisecond)); !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && err == nil {
		t.Error("the retried submit emitted a second event")
	}
}
