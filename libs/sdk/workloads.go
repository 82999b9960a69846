package sdk

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"

	"atoll.dev/libs/computeapi"
)

// Operation is what Operate does to a workload.
type Operation string

// The operations of the contract's operateWorkload.
const (
	// Pause holds an App's replicas at zero and suspends a JobSet's jobs.
	Pause Operation = "pause"
	// Resume undoes Pause.
	Resume Operation = "resume"
	// Stop removes every object of the workload and releases its quota,
	// keeping the workload.
	Stop Operation = "stop"
	// Start undoes Stop.
	Start Operation = "start"
	// Restart is a rolling restart.
	Restart Operation = "restart"
)

// Operations lists every Operation.
var Operations = []Operation{Pause, Resume, Stop, Start, Restart}

// settles reports whether repeating op leaves the same state as doing it
// once, so a lost answer may be retried like a PUT.
func (op Operation) settles() bool { return op != Restart }

// NewIdempotencyKey returns a random key in the shape of a version 4 UUID.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// CreateWorkload creates a workload from a typed document. It always sends
// an Idempotency-Key, idempotencyKey or a random one per call, kept across
// the call's retries, so a retried create returns the first outcome.
func (c *Client) CreateWorkload(ctx context.Context, project string, doc computeapi.WorkloadDocument, idempotencyKey string) (*computeapi.Workload, error) {
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("create %s %s: encode: %w", doc.Kind, doc.Metadata.Name, err)
	}
	return c.CreateWorkloadJSON(ctx, project, body, idempotencyKey)
}

// CreateWorkloadJSON creates a workload from a JSON document sent as is,
// with an Idempotency-Key as CreateWorkload.
func (c *Client) CreateWorkloadJSON(ctx context.Context, project string, doc []byte, idempotencyKey string) (*computeapi.Workload, error) {
	if idempotencyKey == "" {
		idempotencyKey = NewIdempotencyKey()
	}
	r, err := c.API.CreateWorkloadWithBodyWithResponse(ctx, project,
		&computeapi.CreateWorkloadParams{IdempotencyKey: idempotencyKey}, "application/json", bytes.NewReader(doc))
	return decode[computeapi.Workload]("create workload", r, err)
}

// UpdateWorkloadJSON replaces the spec and labels of the workload kind/name
// with a JSON document sent as is.
func (c *Client) UpdateWorkloadJSON(ctx context.Context, project, kind, name string, doc []byte) (*computeapi.Workload, error) {
	r, err := c.API.UpdateWorkloadWithBodyWithResponse(ctx, project, kind, name, "application/json", bytes.NewReader(doc))
	return decode[computeapi.Workload]("update workload", r, err)
}

// Apply creates the workload of one document (YAML or JSON), or updates it
// when it exists already (409 AlreadyExists). The project is the
// document's metadata.project, else project. created says which happened.
func (c *Client) Apply(ctx context.Context, project string, doc []byte) (w *computeapi.Workload, created bool, err error) {
	d, err := ParseDocument(doc)
	if err != nil {
		return nil, false, err
	}
	return c.ApplyDocument(ctx, project, d)
}

// ApplyDocument is Apply of a parsed document.
func (c *Client) ApplyDocument(ctx context.Context, project string, d *Document) (w *computeapi.Workload, created bool, err error) {
	project, err = d.project(project)
	if err != nil {
		return nil, false, err
	}
	w, err = c.CreateWorkloadJSON(ctx, project, d.JSON, "")
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusConflict && e.Body.Code == "AlreadyExists" {
		w, err = c.UpdateWorkloadJSON(ctx, project, d.Kind, d.Name, d.JSON)
		return w, false, err
	}
	return w, err == nil, err
}

// Get returns a workload with its status.
func (c *Client) Get(ctx context.Context, project, kind, name string) (*computeapi.Workload, error) {
	r, err := c.API.GetWorkloadWithResponse(ctx, project, kind, name)
	return decode[computeapi.Workload]("get workload", r, err)
}

// List returns one page of a project's workloads; params filter by kind,
// labels and phase, and page with Limit and Continue.
func (c *Client) List(ctx context.Context, project string, params computeapi.ListWorkloadsParams) (*computeapi.WorkloadList, error) {
	r, err := c.API.ListWorkloadsWithResponse(ctx, project, &params)
	return decode[computeapi.WorkloadList]("list workloads", r, err)
}

// Pages iterates over every page of List from params.Continue on; it ends
// after the last page or the first error.
func (c *Client) Pages(ctx context.Context, project string, params computeapi.ListWorkloadsParams) iter.Seq2[*computeapi.WorkloadList, error] {
	return func(yield func(*computeapi.WorkloadList, error) bool) {
		for {
			page, err := c.List(ctx, project, params)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(page, nil) || page.Continue == "" {
				return
			}
			params.Continue = page.Continue
		}
	}
}

// ListAll returns the workloads of every page.
func (c *Client) ListAll(ctx context.Context, project string, params computeapi.ListWorkloadsParams) ([]computeapi.Workload, error) {
	var all []computeapi.Workload
	for page, err := range c.Pages(ctx, project, params) {
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
	}
	return all, nil
}

// Delete deletes a workload; its objects leave every member cluster.
func (c *Client) Delete(ctx context.Context, project, kind, name string) error {
	r, err := c.API.DeleteWorkloadWithResponse(ctx, project, kind, name, nil)
	return noContent("delete workload", r, err)
}

// ForceDelete deletes a Config or Secret even while workloads name it
// (they then show the condition ConfigMissing); any other workload as
// Delete does.
func (c *Client) ForceDelete(ctx context.Context, project, kind, name string) error {
	r, err := c.API.DeleteWorkloadWithResponse(ctx, project, kind, name, &computeapi.DeleteWorkloadParams{Force: true})
	return noContent("delete workload", r, err)
}

// Operate pauses, resumes, stops, starts or restarts a workload. Every
// operation but Restart is retried like a PUT (repeating it changes
// nothing); Restart is not retried after a server error.
func (c *Client) Operate(ctx context.Context, project, kind, name string, op Operation) (*computeapi.Workload, error) {
	if op.settles() {
		ctx = repeatable(ctx)
	}
	r, err := c.API.OperateWorkloadWithResponse(ctx, project, kind, name, string(op))
	return decode[computeapi.Workload](string(op)+" workload", r, err)
}

// RestartContainer replaces the pods of a workload that run container (a
// rolling replacement for an App, within its availability budget):
// Kubernetes cannot restart one container of a running pod.
func (c *Client) RestartContainer(ctx context.Context, project, kind, name, container string) (*computeapi.Workload, error) {
	r, err := c.API.RestartContainerWithResponse(ctx, project, kind, name, container)
	return decode[computeapi.Workload]("restart container", r, err)
}

// Scale sets an App's replicas or a JobSet's parallelism (retried like a
// PUT: the target is absolute).
func (c *Client) Scale(ctx context.Context, project, kind, name string, replicas int32) (*computeapi.Workload, error) {
	r, err := c.API.ScaleWorkloadWithResponse(repeatable(ctx), project, kind, name, computeapi.ScaleRequest{Replicas: replicas})
	return decode[computeapi.Workload]("scale workload", r, err)
}
