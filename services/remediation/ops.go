package remediation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The endpoints are bus.RemediationStatus (a ClusterStatus per cluster,
// answered as api.RemediationClusterStatus: ClusterStatus.API),
// RemediationPause and RemediationResume; they answer the gateway's user
// (which checks its caller is a platform admin) and the admin user
// (operators: `atoll-admin remediation`).

// OpTimeout bounds each request.
const OpTimeout = 10 * time.Second

// StatusRequest asks for one cluster's status, or every cluster's.
type StatusRequest = api.RemediationStatusRequest

// ClusterStatus is one cluster's remediation status: its view (reachable,
// paused, breakers), the disruption leases on its nodes, and every node
// the service watches that is not simply healthy, with what is being
// done to it, why, and its history.
type ClusterStatus struct {
	ClusterView
	Leases []LeaseInfo `json:"leases,omitempty"`
	Nodes  []NodeState `json:"nodes,omitempty"`
}

// LeaseInfo is one disruption lease.
type LeaseInfo struct {
	Node    string    `json:"node"`
	Owner   string    `json:"owner"`
	Reason  string    `json:"reason,omitempty"`
	Expires time.Time `json:"expires"`
}

// API is the status as the status endpoint answers it: the libs/api
// types, field for field (the wire format is this type's JSON).
func (c ClusterStatus) API() api.RemediationClusterStatus {
	out := api.RemediationClusterStatus{
		Cluster: c.Cluster, Holder: c.Holder, Reachable: c.Reachable, Paused: c.Paused, Time: c.Time,
	}
	for _, b := range c.Breakers {
		out.Breakers = append(out.Breakers, api.RemediationBreaker{
			Domain: b.Domain, Unhealthy: b.Unhealthy, Total: b.Total, Allowed: b.Allowed, Open: b.Open,
			OpenedAt: b.OpenedAt, CoolingUntil: b.CoolingUntil,
		})
	}
	for _, l := range c.Leases {
		out.Leases = append(out.Leases, api.RemediationLease{Node: l.Node, Owner: l.Owner, Reason: l.Reason, Expires: l.Expires})
	}
	for _, n := range c.Nodes {
		out.Nodes = append(out.Nodes, n.API())
	}
	return out
}

// API is the node's state as the status endpoint answers it.
func (n NodeState) API() api.RemediationNode {
	out := api.RemediationNode{
		Cluster: n.Cluster, Node: n.Node, UID: n.UID, Pool: n.Pool, Zone: n.Zone,
		Phase: string(n.Phase), PhaseSince: n.PhaseSince, Signal: n.Signal, UnhealthySince: n.UnhealthySince,
		Waiting: n.Waiting, Transitions: slices.Clone(n.Transitions), Flapping: n.Flapping,
		Drain: api.RemediationDrain{
			Started: n.Drain.Started, Passes: n.Drain.Passes, NextPass: n.Drain.NextPass, Force: n.Drain.Force,
		},
		Replace: api.RemediationReplace{
			Attempt: n.Replace.Attempt, Name: n.Replace.Name, Started: n.Replace.Started, Prev: n.Replace.Prev, Done: n.Replace.Done,
		},
	}
	for _, p := range n.Drain.Evicted {
		out.Drain.Evicted = append(out.Drain.Evicted, api.RemediationPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID})
	}
	for _, b := range n.Drain.Blocked {
		out.Drain.Blocked = append(out.Drain.Blocked, api.RemediationBlocked{
			Pod: api.RemediationPod{Namespace: b.Pod.Namespace, Name: b.Pod.Name, UID: b.Pod.UID}, PDB: b.PDB, Message: b.Message,
		})
	}
	for _, e := range n.History {
		out.History = append(out.History, api.RemediationEvent{Seq: e.Seq, Time: e.Time, Event: e.Event, Message: e.Message})
	}
	return out
}

// PauseRequest pauses or resumes a cluster ("" for the region).
type PauseRequest = api.RemediationPauseRequest

func (s *Service) startOps(ctx context.Context) error {
	eps, err := s.bus.Serve(ctx,
		bus.ServeConfig{Name: bus.UserRemediation, Description: "node remediation: status, pause, resume", Concurrency: 4,
			Metrics: s.metrics, Logger: s.log},
		bus.RemediationStatus.Endpoint(OpTimeout, s.status),
		bus.RemediationPause.Endpoint(OpTimeout, s.pause),
		bus.RemediationResume.Endpoint(OpTimeout, s.resume),
	)
	if err != nil {
		return err
	}
	s.ops = eps
	return nil
}

func (s *Service) checkCluster(name string) error {
	if name != "" && s.clusters[name] == nil {
		return bus.Errorf(http.StatusNotFound, "NotFound", "no member cluster %q", name)
	}
	return nil
}

func (s *Service) status(ctx context.Context, r StatusRequest, _ micro.Request) ([]api.RemediationClusterStatus, error) {
	if err := s.checkCluster(r.Cluster); err != nil {
		return nil, err
	}
	var out []api.RemediationClusterStatus
	for _, name := range sortedKeys(s.clusters) {
		if r.Cluster != "" && name != r.Cluster {
			continue
		}
		st, err := s.Status(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, st.API())
	}
	return out, nil
}

// Status reads one cluster's status from the bucket and the ledger.
func (s *Service) Status(ctx context.Context, cluster string) (ClusterStatus, error) {
	out := ClusterStatus{ClusterView: ClusterView{Cluster: cluster}}
	if e, err := s.kv.Get(ctx, StatusKey(cluster)); err == nil {
		_ = json.Unmarshal(e.Value(), &out.ClusterView)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return out, fmt.Errorf("status of %s: %w", cluster, err)
	}
	if why, err := s.paused(ctx, cluster); err == nil {
		out.Paused = why
	}
	leases, err := s.ledger.Leases(ctx, cluster)
	if err != nil {
		return out, err
	}
	for _, l := range leases {
		out.Leases = append(out.Leases, LeaseInfo{Node: l.Node.Name, Owner: l.Owner, Reason: l.Reason, Expires: l.Expires})
	}
	lister, err := s.kv.ListKeysFiltered(ctx, "n."+cluster+".*")
	if err != nil {
		return out, fmt.Errorf("status of %s: %w", cluster, err)
	}
	for k := range lister.Keys() {
		e, err := s.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var st NodeState
		if json.Unmarshal(e.Value(), &st) == nil {
			out.Nodes = append(out.Nodes, st)
		}
	}
	slices.SortFunc(out.Nodes, func(a, b NodeState) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

func (s *Service) pause(ctx context.Context, r PauseRequest, _ micro.Request) (api.RemediationScope, error) {
	if err := s.checkCluster(r.Cluster); err != nil {
		return api.RemediationScope{}, err
	}
	b, _ := json.Marshal(Pause{Reason: r.Reason, By: r.By, Since: time.Now().UTC()})
	key := KeyPauseRegion
	if r.Cluster != "" {
		key = PauseKey(r.Cluster)
	}
	if _, err := s.kv.Put(ctx, key, b); err != nil {
		return api.RemediationScope{}, fmt.Errorf("pause: %w", err)
	}
	s.log.Info("remediation paused", "cluster", r.Cluster, "reason", r.Reason, "by", r.By)
	return api.RemediationScope{Paused: scope(r.Cluster)}, nil
}

func (s *Service) resume(ctx context.Context, r PauseRequest, _ micro.Request) (api.RemediationScope, error) {
	if err := s.checkCluster(r.Cluster); err != nil {
		return api.RemediationScope{}, err
	}
	key := KeyPauseRegion
	if r.Cluster != "" {
		key = PauseKey(r.Cluster)
	}
	if err := s.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return api.RemediationScope{}, fmt.Errorf("resume: %w", err)
	}
	s.log.Info("remediation resumed", "cluster", r.Cluster, "by", r.By)
	return api.RemediationScope{Resumed: scope(r.Cluster)}, nil
}

func scope(cluster string) string {
	if cluster == "" {
		return "region"
	}
	return cluster
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
