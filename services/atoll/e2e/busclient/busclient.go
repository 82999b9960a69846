// Package busclient talks to a region over the bus, as the gateway does:
// submit, update, operate on and delete workloads through admission, set
// quota, and read status from the buckets. The end-to-end tests and the
// benchmark use it.
//
// With permissions on, it needs two connections: the endpoints it calls
// (admission, quota's get and set, the aggregator's cluster operations)
// answer only the gateway's NATS user, and what it reads (the workloads,
// placements, status and clusters buckets, events on core NATS) takes
// more than the gateway's user may read, so it reads as another user (the
// admin, in tests).
package busclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Client is a region client.
type Client struct {
	b   *bus.Bus // reads buckets and events
	req *bus.Requester
}

// New returns a client that reads over reader and calls the endpoints over
// caller, which should be connected as bus.UserGateway (region.ConnectAs);
// a nil caller means reader (a region without permissions).
func New(reader, caller *bus.Bus) *Client {
	if caller == nil {
		caller = reader
	}
	return &Client{b: reader, req: bus.NewRequester(caller.NC, bus.RequestPolicy{})}
}

// Error is a rejection by the region: its status and body.
type Error struct {
	Status int
	Body   api.ErrorBody
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Body.Code, e.Body.Message)
}

// call calls an endpoint of the region and returns its refusal as an
// *Error.
func call[Req, Resp any](ctx context.Context, c *Client, ep bus.Call[Req, Resp], req Req) (Resp, error) {
	out, err := ep.Call(ctx, c.req, req)
	var re *bus.RemoteError
	if errors.As(err, &re) {
		e := &Error{Status: re.Code}
		if json.Unmarshal(re.Body, &e.Body) != nil {
			e.Body = api.ErrorBody{Code: "Error", Message: re.Description}
		}
		return out, e
	}
	return out, err
}

// Submit admits a new workload document (JSON).
func (c *Client) Submit(ctx context.Context, doc []byte) (*api.Workload, error) {
	return call(ctx, c, bus.AdmissionSubmit, doc)
}

// Update replaces a workload's spec.
func (c *Client) Update(ctx context.Context, doc []byte) (*api.Workload, error) {
	return call(ctx, c, bus.AdmissionUpdate, doc)
}

// Apply submits a workload, or updates it if it exists.
func (c *Client) Apply(ctx context.Context, doc []byte) (*api.Workload, error) {
	w, err := c.Submit(ctx, doc)
	var e *Error
	if errors.As(err, &e) && e.Body.Code == "AlreadyExists" {
		return c.Update(ctx, doc)
	}
	return w, err
}

// Operate runs one operation (pause, resume, stop, start, restart,
// restart-container, scale) on a workload and returns it as stored after.
func (c *Client) Operate(ctx context.Context, op api.Operation) (*api.Workload, error) {
	return call(ctx, c, bus.AdmissionOperate, op)
}

// Delete removes a workload.
func (c *Client) Delete(ctx context.Context, project, kind, name string) error {
	_, err := call(ctx, c, bus.AdmissionDelete, api.WorkloadRef{Project: project, Kind: kind, Name: name})
	return err
}

// SetQuota sets a project's limit for a tier.
func (c *Client) SetQuota(ctx context.Context, project string, tier api.Tier, lim api.Limit) error {
	_, err := call(ctx, c, bus.QuotaSet, api.QuotaSet{Project: project, Tier: tier, Limit: lim})
	return err
}

// Quota returns a project's limits, usage per tier and number of
// reservations (api.Ledger, without the reservations themselves).
func (c *Client) Quota(ctx context.Context, project string) (*api.Ledger, error) {
	return call(ctx, c, bus.QuotaGet, api.QuotaRelease{Project: project})
}

// Status reads a workload's status; nil when it has none.
func (c *Client) Status(ctx context.Context, key string) (*api.Status, error) {
	var st api.Status
	ok, err := c.get(ctx, bus.BucketStatus, key, &st)
	if !ok {
		return nil, err
	}
	return &st, err
}

// Placement reads a workload's placement; nil when it has none.
func (c *Client) Placement(ctx context.Context, key string) (*api.PlacementDecision, error) {
	var p api.PlacementDecision
	ok, err := c.get(ctx, bus.BucketPlacements, key, &p)
	if !ok {
		return nil, err
	}
	return &p, err
}

// Workload reads a stored workload; nil when it does not exist.
func (c *Client) Workload(ctx context.Context, key string) (*api.Workload, error) {
	kv, err := c.b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return api.Decode(e.Value())
}

// Clusters reads the cluster inventory.
func (c *Client) Clusters(ctx context.Context) ([]api.ClusterInfo, error) {
	kv, err := c.b.KV(ctx, bus.BucketClusters)
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []api.ClusterInfo
	for k := range keys.Keys() {
		var ci api.ClusterInfo
		if ok, err := c.get(ctx, bus.BucketClusters, k, &ci); ok && err == nil {
			out = append(out, ci)
		}
	}
	return out, nil
}

func (c *Client) get(ctx context.Context, bucket, key string, v any) (bool, error) {
	kv, err := c.b.KV(ctx, bucket)
	if err != nil {
		return false, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, json.Unmarshal(e.Value(), v)
}

// WatchEvents subscribes to a workload's domain events (core NATS; no replay).
func (c *Client) WatchEvents(project, kind, name string) (*nats.Subscription, error) {
	return c.b.NC.SubscribeSync(bus.EventSubject(project, kind, name, "*"))
}

// Cordon cordons (on) or uncordons a member cluster through the
// aggregator and returns the cluster's inventory as written.
func (c *Client) Cordon(ctx context.Context, cluster string, on bool) (*api.ClusterInfo, error) {
	op := api.ClusterOpUncordon
	if on {
		op = api.ClusterOpCordon
	}
	return c.clusterOp(ctx, api.ClusterOp{Cluster: cluster, Op: op})
}

// SetClusterLabels sets and removes admin labels of a member cluster
// through the aggregator and returns the cluster's inventory as written.
func (c *Client) SetClusterLabels(ctx context.Context, cluster string, set map[string]string, remove []string) (*api.ClusterInfo, error) {
	return c.clusterOp(ctx, api.ClusterOp{Cluster: cluster, Op: api.ClusterOpLabels, SetLabels: set, RemoveLabels: remove})
}

func (c *Client) clusterOp(ctx context.Context, op api.ClusterOp) (*api.ClusterInfo, error) {
	return call(ctx, c, bus.AggregatorCluster, op)
}
