package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// change is what an operation did, for its event.
type change struct {
	event, message string
}

// Operate applies one operation to a stored workload (see api.Operation):
// it changes the workload's Control, or for a scale its spec, bumps the
// generation, adjusts the quota reservation when the demand changes (a
// stop holds nothing, a start reserves again and can be refused), writes
// with compare-and-set and publishes the operation's event. An operation
// that changes nothing (pausing what is paused) returns the stored
// workload as it is: no new generation, no event.
//
// Errors: 400 for a malformed operation or an unknown container, 404 for a
// missing workload, 409 for what the kind or the workload's state does not
// support (pausing or scaling a Pod, restarting a stopped workload) and for
// QuotaExceeded.
func (s *Service) Operate(ctx context.Context, op api.Operation, p Principal) (*api.Workload, error) {
	if fe := op.Validate(); len(fe) > 0 {
		return nil, &Error{Status: api.StatusBadRequest, Body: api.ErrorBody{Code: "Invalid", Message: fe.Error(), Fields: fe}}
	}
	key := api.Key(op.Project, op.Kind, op.Name)
	res := &reservation{s: s, project: op.Project, key: key}
	var out *api.Workload
	rev, err := bus.Update(ctx, s.workloads, key, func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, &Error{Status: api.StatusNotFound, Body: api.ErrorBody{Code: "NotFound", Message: fmt.Sprintf("%s/%s/%s not found", op.Project, op.Kind, op.Name)}}
		}
		stored, err := api.Decode(cur)
		if err != nil {
			return nil, unavailable(fmt.Errorf("decode stored %s: %w", key, err))
		}
		now := time.Now().UTC()
		next, ch, aerr := applyOperation(stored, op, now)
		if aerr != nil {
			return nil, aerr
		}
		if ch == nil {
			out = stored
			return nil, bus.ErrNoChange
		}
		if fe := api.ValidateWith(next, s.limits.Keeping(stored.Spec.PodTemplate())); len(fe) > 0 {
			return nil, invalid(fe)
		}
		if err := res.hold(ctx, stored, next); err != nil {
			return nil, err
		}
		s.beforeWrite(ctx, key)
		next.Metadata.Generation, next.Metadata.Updated = stored.Metadata.Generation+1, now
		next.Metadata.Event, next.Metadata.EventMessage = ch.event, ch.message
		out = next
		return json.Marshal(next)
	})
	if err == nil {
		s.log.Debug("operation", "key", key, "op", op.Op, "principal", p.Name, "generation", out.Metadata.Generation)
	}
	return s.settle(ctx, res, out, rev, err, fmt.Sprintf("%s/%s/%s", op.Project, op.Kind, op.Name))
}

// applyOperation returns cur with op applied and what changed, or a nil
// change when op changes nothing. cur is not modified.
func applyOperation(cur *api.Workload, op api.Operation, now time.Time) (*api.Workload, *change, *Error) {
	next, err := clone(cur)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	if fe := op.CheckKind(); len(fe) > 0 {
		return nil, nil, unsupported(op, fe[0].Reason)
	}
	c := &next.Control
	switch op.Op {
	case api.OpPause, api.OpResume:
		pause := op.Op == api.OpPause
		if c.Paused == pause {
			return nil, nil, nil
		}
		c.Paused = pause
		if pause {
			return next, &change{api.EventPaused, pausedMessage(cur.Kind)}, nil
		}
		return next, &change{api.EventResumed, "resumed"}, nil
	case api.OpStop, api.OpStart:
		stop := op.Op == api.OpStop
		if c.Stopped == stop {
			return nil, nil, nil
		}
		c.Stopped = stop
		if stop {
			return next, &change{api.EventStopped, "stopped: every object is removed from the member clusters and the quota is released"}, nil
		}
		return next, &change{api.EventStarted, "started"}, nil
	case api.OpRestart:
		if c.Stopped {
			return nil, nil, stoppedConflict(op)
		}
		c.RestartedAt = after(now, c.RestartedAt)
		return next, &change{api.EventRestarted, "every pod is restarted"}, nil
	case api.OpRestartContainer:
		if c.Stopped {
			return nil, nil, stoppedConflict(op)
		}
		var names []string
		for _, ct := range next.Spec.PodTemplate().Containers {
			names = append(names, ct.Name)
		}
		if !slices.Contains(names, op.Container) {
			fe := api.FieldErrors{{Field: "container", Code: api.CodeInvalid,
				Reason: fmt.Sprintf("%s has no container %q; one of %s", cur, op.Container, strings.Join(names, ", "))}}
			return nil, nil, &Error{Status: api.StatusBadRequest, Body: api.ErrorBody{Code: "Invalid", Message: fe.Error(), Fields: fe}}
		}
		if c.ContainerRestarts == nil {
			c.ContainerRestarts = map[string]time.Time{}
		}
		c.ContainerRestarts[op.Container] = after(now, c.ContainerRestarts[op.Container])
		return next, &change{api.EventRestarted, fmt.Sprintf("container %s is restarted (its pods are replaced)", op.Container)}, nil
	case api.OpRolloutPause, api.OpRolloutResume, api.OpRolloutUndo:
		ch, err := applyRolloutOperation(next, op, now) // rollout.go
		if err != nil {
			return nil, nil, err
		}
		return next, ch, nil
	case api.OpScale:
		n := *op.Replicas
		switch spec := next.Spec.(type) {
		case *api.AppSpec:
			was := spec.Pods()
			if spec.Replicas != nil && *spec.Replicas == n {
				return nil, nil, nil
			}
			spec.Replicas = &n
			return next, &change{api.EventScaled, fmt.Sprintf("replicas %d -> %d", was, n)}, nil
		case *api.JobSetSpec:
			if n < 1 || n > spec.Completions {
				fe := api.FieldErrors{{Field: "replicas", Code: api.CodeInvalid,
					Reason: fmt.Sprintf("a JobSet's parallelism is between 1 and its completions (%d), got %d; pause it to run nothing", spec.Completions, n)}}
				return nil, nil, &Error{Status: api.StatusBadRequest, Body: api.ErrorBody{Code: "Invalid", Message: fe.Error(), Fields: fe}}
			}
			if spec.Parallelism == n {
				return nil, nil, nil
			}
			was := spec.Parallelism
			spec.Parallelism = n
			return next, &change{api.EventScaled, fmt.Sprintf("parallelism %d -> %d", was, n)}, nil
		default:
			return nil, nil, unsupported(op, fmt.Sprintf("a %s cannot be scaled: it always runs one pod", cur.Kind))
		}
	}
	// Validate let only known operations through.
	return nil, nil, &Error{Status: api.StatusBadRequest, Body: api.ErrorBody{Code: "Invalid", Message: fmt.Sprintf("unknown operation %q", op.Op)}}
}

func pausedMessage(kind string) string {
	if k, ok := api.LookupKind(kind); ok && k.Paused != "" {
		return "paused: " + k.Paused
	}
	return "paused"
}

// after returns now, or just after prev when the clock has not passed it,
// so every restart changes the recorded time.
func after(now, prev time.Time) time.Time {
	if now.After(prev) {
		return now
	}
	return prev.Add(time.Nanosecond)
}

func unsupported(op api.Operation, reason string) *Error {
	fe := api.FieldErrors{{Field: "op", Code: api.CodeUnsupported, Reason: reason}}
	return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "Unsupported", Message: fe.Error(), Fields: fe}}
}

func stoppedConflict(op api.Operation) *Error {
	return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "Conflict",
		Message: fmt.Sprintf("%s/%s/%s is stopped: nothing runs to %s; start it instead", op.Project, op.Kind, op.Name, op.Op)}}
}

// clone returns a deep copy of w.
func clone(w *api.Workload) (*api.Workload, error) {
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", w, err)
	}
	return api.Decode(b)
}

// reserveQuietly sets w's reservation back to what w holds, when a write
// that reserved something else did not happen. A failure is logged: the
// next change of the workload reserves again.
func (s *Service) reserveQuietly(ctx context.Context, w *api.Workload) {
	if err := s.reserve(ctx, w); err != nil {
		s.log.Warn("restore quota reservation", "key", w.Key(), "err", err)
	}
}

// operate is bus.AdmissionOperate: only the gateway's user may publish to
// its subject, so the identity headers are the gateway's word.
func (s *Service) operate(ctx context.Context, op api.Operation, r micro.Request) (*api.Workload, error) {
	return s.Operate(ctx, op, principal(r))
}

// autoscale is bus.AdmissionAutoscale: only the autoscaler's user may
// publish to its subject, so the caller is the autoscaler (its headers
// are not read), and it may only scale Apps.
func (s *Service) autoscale(ctx context.Context, op api.Operation, _ micro.Request) (*api.Workload, error) {
	if op.Op != api.OpScale || op.Kind != api.KindApp {
		return nil, &Error{Status: api.StatusForbidden, Body: api.ErrorBody{Code: "Forbidden",
			Message: fmt.Sprintf("the autoscaler may only scale Apps, not %s", op.String())}}
	}
	return s.Operate(ctx, op, Principal{Name: bus.UserAutoscaler})
}
