package events_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
)

// TestEventsCarryCloudEventsAttributes reads a published event as a
// subscriber outside the platform does: its CloudEvents attributes from
// the headers, its body unchanged.
func TestEventsCarryCloudEventsAttributes(t *testing.T) {
	ctx := context.Background()
	b := openBus(t)
	p := events.NewPublisher(b, slog.Default(), events.Options{})
	before := time.Now().Add(-time.Second)
	if err := p.Publish(ctx, workload(3), api.EventAdmitted, "hello", 7); err != nil {
		t.Fatal(err)
	}
	s, err := b.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "atoll.evt.p.app.web.admitted")
	if err != nil {
		t.Fatal(err)
	}
	ce, err := events.ParseCloudEvent(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"specversion": ce.SpecVersion(), "id": ce.ID(), "source": ce.Source(), "type": ce.Type(),
		"subject": ce.Subject(), "datacontenttype": ce.DataContentType()}
	want := map[string]string{"specversion": "1.0", "id": "p/app/web.admitted@7", "source": "/v1/projects/p",
		"type": "dev.atoll.workload.admitted", "subject": "app/web", "datacontenttype": "application/json"}
	want["id"] = events.MsgID(workload(3).Key(), api.EventAdmitted, 7)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	if ce.Time().Before(before) || ce.Time().After(time.Now()) {
		t.Errorf("time %v, want now", ce.Time())
	}
	var ev api.WorkloadEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Event != api.EventAdmitted || ev.Message != "hello" || ev.Generation != 3 {
		t.Errorf("body %s (%v), want the WorkloadEvent", m.Data, err)
	}
}
