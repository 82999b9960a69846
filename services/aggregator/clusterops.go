package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
)

// OpError is a refused cluster operation as data: an HTTP-like status and
// a body, which the endpoint answers as they are (bus.Error).
type OpError = bus.Error

// OpTimeout bounds each cluster operation.
const OpTimeout = 10 * time.Second

// errNoInventory says a cluster has no inventory record to change yet.
var errNoInventory = errors.New("no inventory yet")

// startOps registers the cluster-operations endpoint; requests in flight
// end with ctx.
func (s *Service) startOps(ctx context.Context) error {
	eps, err := s.bus.Serve(ctx,
		bus.ServeConfig{Name: bus.UserAggregator, Description: "member-cluster operations", Concurrency: 16,
			Metrics: s.metrics, Logger: s.log},
		// The cluster-operations endpoint of platform admins: only the
		// gateway calls it, having checked that the caller is one.
		bus.AggregatorCluster.Endpoint(OpTimeout, s.clusterOp),
	)
	if err != nil {
		return err
	}
	s.ops = eps
	return nil
}

// stopOps unregisters the endpoint and cancels the requests in flight.
func (s *Service) stopOps() {
	if s.ops == nil {
		return
	}
	if err := s.ops.Stop(); err != nil {
		s.log.Warn("stop cluster operations endpoint", "err", err)
	}
	s.ops = nil
}

func (s *Service) clusterOp(ctx context.Context, op api.ClusterOp, _ micro.Request) (*api.ClusterInfo, error) {
	return s.ApplyClusterOp(ctx, op)
}

// ApplyClusterOp validates a platform admin's operation on a member
// cluster, records it in the cluster's inventory with compare-and-set,
// publishes its signal when it changed anything, and returns the inventory
// as written. Refusals are *OpError: 400 for a bad operation, 404 for a
// cluster that is not a member, 503 when the inventory cannot be written.
func (s *Service) ApplyClusterOp(ctx context.Context, op api.ClusterOp) (*api.ClusterInfo, error) {
	c, err := s.checkOp(&op)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	var (
		out   api.ClusterInfo
		event string
	)
	rev, err := bus.Update(ctx, s.clusterKV, op.Cluster, func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, errNoInventory
		}
		var ci api.ClusterInfo
		if err := json.Unmarshal(cur, &ci); err != nil {
			return nil, fmt.Errorf("decode inventory: %w", err)
		}
		admin, ev, changed := applyOp(ci.Admin, &op, now)
		if !changed {
			out = ci
			return nil, bus.ErrNoChange
		}
		ci.Admin = admin
		mergeAdmin(&ci, c.member)
		ci.Updated = now
		out, event = ci, ev
		return json.Marshal(&ci)
	})
	switch {
	case errors.Is(err, bus.ErrNoChange):
		return &out, nil // already so: nothing written, no signal
	case errors.Is(err, errNoInventory):
		return nil, &OpError{Status: api.StatusUnavailable, Body: api.ErrorBody{Code: "Unavailable", Message: fmt.Sprintf("cluster %s has no inventory yet; retry", op.Cluster)}}
	case err != nil:
		return nil, &OpError{Status: api.StatusUnavailable, Body: api.ErrorBody{Code: "Unavailable", Message: fmt.Sprintf("write inventory of cluster %s: %v", op.Cluster, err)}}
	}
	s.log.Info("cluster operation", "cluster", op.Cluster, "op", op.Op, "principal", op.Principal,
		"cordoned", out.Cordoned, "adminLabels", out.Admin.Labels)
	sig := api.ClusterSignal{Cluster: op.Cluster, Event: event, Time: now, Principal: op.Principal}
	if event == api.ClusterEventLabeled {
		sig.Labels = out.Labels
	}
	s.emit(ctx, bus.ClusterSubject(op.Cluster, event), fmt.Sprintf("%s.%s.%d", op.Cluster, event, rev), sig)
	return &out, nil
}

// checkOp returns the operation's cluster, or why the operation is
// refused (400 or 404).
func (s *Service) checkOp(op *api.ClusterOp) (*cluster, error) {
	fe := op.Validate()
	c, member := s.clusters[op.Cluster]
	if member {
		fe = append(fe, configLabelConflicts(op, c.member)...)
	}
	if len(fe) > 0 {
		return nil, invalidOp(fe)
	}
	if !member {
		return nil, &OpError{Status: api.StatusNotFound, Body: api.ErrorBody{Code: "NotFound", Message: fmt.Sprintf("cluster %s is not a member cluster of the region", op.Cluster)}}
	}
	return c, nil
}

func invalidOp(fe api.FieldErrors) *OpError {
	code := "Invalid"
	if slices.ContainsFunc(fe, func(e api.FieldError) bool { return e.Code == api.CodeForbidden }) {
		code = "Forbidden"
	}
	parts := make([]string, len(fe))
	for i, e := range fe {
		parts[i] = e.Field + ": " + e.Reason
	}
	msg := "invalid cluster operation: " + strings.Join(parts, "; ")
	return &OpError{Status: api.StatusBadRequest, Body: api.ErrorBody{Code: code, Message: msg, Fields: fe}}
}

// configLabelConflicts refuses changes to labels the cluster's configuration sets.
func configLabelConflicts(op *api.ClusterOp, m clusters.Member) api.FieldErrors {
	var fe api.FieldErrors
	for _, k := range slices.Sorted(maps.Keys(op.SetLabels)) {
		if _, ok := m.Labels[k]; ok {
			fe = append(fe, api.FieldError{Field: "setLabels." + k, Code: api.CodeForbidden,
				Reason: fmt.Sprintf("label %s comes from the configuration of cluster %s; it cannot be changed here", k, m.Name)})
		}
	}
	for i, k := range op.RemoveLabels {
		if _, ok := m.Labels[k]; ok {
			fe = append(fe, api.FieldError{Field: fmt.Sprintf("removeLabels[%d]", i), Code: api.CodeForbidden,
				Reason: fmt.Sprintf("label %s comes from the configuration of cluster %s; it cannot be removed here", k, m.Name)})
		}
	}
	return fe
}

// applyOp returns the admin overrides after op, the signal to publish, and
// whether anything changed. cur is not modified.
func applyOp(cur api.ClusterAdmin, op *api.ClusterOp, now time.Time) (api.ClusterAdmin, string, bool) {
	next := cur
	var event string
	switch op.Op {
	case api.ClusterOpCordon:
		next.Cordoned, event = true, api.ClusterEventCordoned
	case api.ClusterOpUncordon:
		next.Cordoned, event = false, api.ClusterEventUncordoned
	case api.ClusterOpLabels:
		labels := maps.Clone(cur.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, op.SetLabels)
		for _, k := range op.RemoveLabels {
			delete(labels, k)
		}
		if len(labels) == 0 {
			labels = nil
		}
		next.Labels, event = labels, api.ClusterEventLabeled
	default:
		return cur, "", false
	}
	if next.Cordoned == cur.Cordoned && maps.Equal(next.Labels, cur.Labels) {
		return cur, "", false
	}
	next.By, next.At = op.Principal, now
	return next, event, true
}

// mergeAdmin sets a cluster's effective Cordoned and Labels: the labels of
// its configuration, then the admin labels that neither the configuration
// nor the platform owns.
func mergeAdmin(ci *api.ClusterInfo, m clusters.Member) {
	ci.Cordoned = ci.Admin.Cordoned
	var labels map[string]string
	if len(m.Labels)+len(ci.Admin.Labels) > 0 {
		labels = maps.Clone(m.Labels)
		if labels == nil {
			labels = make(map[string]string, len(ci.Admin.Labels))
		}
		for k, v := range ci.Admin.Labels {
			if _, fromConfig := m.Labels[k]; !fromConfig && !api.ReservedClusterLabel(k) {
				labels[k] = v
			}
		}
	}
	ci.Labels = labels
}

// nextInventory returns the record to write for a freshly computed
// inventory, given the stored one (nil when there is none): the stored
// admin overrides carried over and merged, and the stored capacity when
// fresh has none (Pools nil: the cluster is unreachable or its caches are
// not synced yet). It returns nil when the stored record says the same and
// was written less than maxAge ago.
func nextInventory(fresh api.ClusterInfo, stored []byte, m clusters.Member, now time.Time, maxAge time.Duration) *api.ClusterInfo {
	var prev *api.ClusterInfo
	if stored != nil {
		var p api.ClusterInfo
		if json.Unmarshal(stored, &p) == nil {
			prev = &p
		}
	}
	if prev != nil {
		fresh.Admin = prev.Admin
		if fresh.Pools == nil {
			fresh.Pools = prev.Pools
		}
	}
	mergeAdmin(&fresh, m)
	if prev != nil && now.Sub(prev.Updated) < maxAge && sameInventory(prev, &fresh) {
		return nil
	}
	fresh.Updated = now.UTC()
	return &fresh
}

// sameInventory compares two records but for their times.
func sameInventory(a, b *api.ClusterInfo) bool {
	return bytes.Equal(inventoryBody(a), inventoryBody(b))
}

// inventoryBody is a record without LastSeen and Updated.
func inventoryBody(ci *api.ClusterInfo) []byte {
	c := *ci
	c.LastSeen, c.Updated = time.Time{}, time.Time{}
	b, _ := json.Marshal(&c)
	return b
}
