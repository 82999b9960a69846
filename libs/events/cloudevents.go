package events

import (
	"fmt"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"atoll.dev/libs/api"
)

// Every domain event carries the CloudEvents attributes, in the NATS
// protocol binding's binary content mode: each attribute is a header
// named ce-<attribute>, datacontenttype is Content-Type, and the body is
// the api.WorkloadEvent it always was, so consumers that read the body
// alone (the gateway's SSE, the CLI, the console) see no change.
//
//   - id: the event's idempotency key (MsgID: <key>.<event>@<rev>), the
//     same however often the event is published, so a consumer
//     deduplicates on it;
//   - source: /v1/projects/<project>, the project's resource;
//   - type: dev.atoll.workload.<event> (CloudEventType);
//   - subject: <kind>/<name>, the workload;
//   - time: when the event was published.

// CloudEventsTypePrefix prefixes the type of every domain event.
const CloudEventsTypePrefix = "dev.atoll.workload."

// CloudEventsHeaderPrefix prefixes the header of each CloudEvents
// attribute (the NATS binding's binary content mode).
const CloudEventsHeaderPrefix = "ce-"

// CloudEventType is the CloudEvents type of a domain event.
func CloudEventType(event string) string { return CloudEventsTypePrefix + event }

// CloudEventSource is the CloudEvents source of project's events.
func CloudEventSource(project string) string { return "/v1/projects/" + project }

// CloudEvent is e with its CloudEvents attributes, id being its
// idempotency key; its data is e as published.
func CloudEvent(e api.WorkloadEvent, id string, data []byte) (cloudevents.Event, error) {
	ce := cloudevents.New()
	ce.SetID(id)
	ce.SetSource(CloudEventSource(e.Project))
	ce.SetType(CloudEventType(e.Event))
	ce.SetSubject(strings.ToLower(e.Kind) + "/" + e.Name)
	ce.SetTime(e.Time)
	if err := ce.SetData(cloudevents.ApplicationJSON, data); err != nil {
		return ce, fmt.Errorf("cloudevent %s: %w", id, err)
	}
	if err := ce.Validate(); err != nil {
		return ce, fmt.Errorf("cloudevent %s: %w", id, err)
	}
	return ce, nil
}

// CloudEventHeader is ce's attributes as NATS headers (binary content
// mode); the body is ce's data.
func CloudEventHeader(ce cloudevents.Event) nats.Header {
	h := nats.Header{}
	for name, v := range ce.Context.AsV1().GetExtensions() {
		h.Set(CloudEventsHeaderPrefix+name, fmt.Sprint(v))
	}
	set := func(attr, v string) { h.Set(CloudEventsHeaderPrefix+attr, v) }
	set("specversion", ce.SpecVersion())
	set("id", ce.ID())
	set("source", ce.Source())
	set("type", ce.Type())
	set("subject", ce.Subject())
	set("time", ce.Time().UTC().Format(time.RFC3339Nano))
	h.Set("Content-Type", ce.DataContentType())
	return h
}

// ParseCloudEvent reads the CloudEvent of a message published with
// CloudEventHeader: what a subscriber outside the platform does.
func ParseCloudEvent(h nats.Header, data []byte) (cloudevents.Event, error) {
	ce := cloudevents.New(h.Get(CloudEventsHeaderPrefix + "specversion"))
	ce.SetID(h.Get(CloudEventsHeaderPrefix + "id"))
	ce.SetSource(h.Get(CloudEventsHeaderPrefix + "source"))
	ce.SetType(h.Get(CloudEventsHeaderPrefix + "type"))
	ce.SetSubject(h.Get(CloudEventsHeaderPrefix + "subject"))
	at, err := time.Parse(time.RFC3339Nano, h.Get(CloudEventsHeaderPrefix+"time"))
	if err != nil {
		return ce, fmt.Errorf("cloudevent time: %w", err)
	}
	ce.SetTime(at)
	if err := ce.SetData(h.Get("Content-Type"), data); err != nil {
		return ce, fmt.Errorf("cloudevent data: %w", err)
	}
	if err := ce.Validate(); err != nil {
		return ce, fmt.Errorf("cloudevent: %w", err)
	}
	return ce, nil
}
