package propagator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// The CronJob: its one shard is a Kubernetes CronJob (the scheduler
// places it in one cluster). The Jobs a CronJob makes carry the
// workload's labels, so the aggregator folds them into the CronJob's
// status, and the CronJob's time fence in their annotations:
// api.AnnoFireFrom from the shard (part of the hash: a move changes it)
// and api.AnnoFireUntil, the lease, outside the hash.
//
// The CronJob time fence (the rule is stated at api.KindCronJob). A lost
// member cluster cannot be stopped from outside: when its API server
// comes back, its kube-controller-manager may create a Job for a schedule
// time the CronJob's new cluster already fired, before this service gets
// to delete the stale CronJob. So the fence is inside every member
// cluster, enforced by its own API server on the Job being created:
//
//   - FenceName, a ValidatingAdmissionPolicy and its binding, applied
//     (server-side apply, idempotent) in every member cluster a term
//     serves: before this service creates a CronJob in a cluster for the
//     first time, and, in a cluster that holds CronJobs, when a term
//     starts and again every fenceReapply (a cluster without CronJobs
//     gets no write). It matches the creation of Jobs in the projects' namespaces
//     (label api.LabelProject) that carry the workload label, and only
//     those with the CronJob controller's schedule time annotation and a
//     fence annotation. CEL has no "now", so it compares two annotations
//     of the Job: the schedule time must be within [api.AnnoFireFrom,
//     api.AnnoFireUntil]; an unreadable time fails closed (failurePolicy
//     Fail). Jobs without fence annotations are not touched.
//   - The annotations come from the CronJob's Job template, which the
//     CronJob controller copies onto every Job. AnnoFireFrom is rendered
//     from the shard (api.Shard.FireFrom, which the scheduler sets on a
//     move); AnnoFireUntil is a lease: every render (a create or an apply)
//     writes api.CronFireUntil(now), outside the spec hash (kind.
//     unhashed), and each term renews it every api.CronFenceRenew on
//     every CronJob the placement keeps in its cluster (fence), with a
//     server-side apply of that one annotation under its own field
//     manager (FenceManager), so the propagator's own apply never fights
//     it and never removes it.
//
// Why it holds: the old cluster's last renewal was computed before this
// service saw the move, so its AnnoFireUntil is at most move time + lag +
// V (api.CronFenceLease), below the new shard's AnnoFireFrom (move time +
// V + api.CronFenceMargin). A renewal sent to a frozen API server and
// processed when it resumes carries the value computed when it was sent:
// the lease is a time, not a duration, so a late write cannot extend it.
// Times are whole seconds: AnnoFireFrom rounded up, AnnoFireUntil down.
// A newly applied policy takes effect about a second later (0.8 s in
// TestCronJobFenceInAMemberCluster); a CronJob created meanwhile is not
// exposed: its lease ends V after its creation and its fire-from is at
// least V + margin after it, far beyond that second.
//
// What it costs. One server-side apply (a PATCH of ~300 bytes, no change
// to the object's spec hash, so no informer work here) per CronJob per
// api.CronFenceRenew: 2 writes per CronJob per minute, each also waking
// that CronJob in its cluster's CronJob controller (a read, no write). A
// healthy cluster whose renewals fail for a whole lease (its propagator
// down for V) stops firing until the next renewal, and says why: the
// controller's FailedCreate events name the policy. A denied time is
// retried by the CronJob controller until its starting deadline passes,
// then skipped.

var cronjobs = batchv1.SchemeGroupVersion.WithResource("cronjobs")

// cronJobKind is the CronJob's part of the propagator; fence is the time
// fence's periods (the Service's; zero: api.DefaultCronFence).
type cronJobKind struct {
	basic
	fence api.CronFence
}

func (cronJobKind) resource() schema.GroupVersionResource { return cronjobs }

func (cronJobKind) render(d *desired, sh api.Shard) object { return renderCronJob(d.workload, sh) }

// unhashed writes the CronJob's lease.
func (k cronJobKind) unhashed(o *object, now time.Time) { leaseCronJob(o, k.fence.FireUntil(now)) }

// create applies the fence first: no Job of the CronJob escapes it.
func (cronJobKind) create(ctx context.Context, tt *term, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error {
	if err := ensureFence(ctx, tt, cs, false); err != nil {
		return err
	}
	_, err := cs.BatchV1().CronJobs(ns).Create(ctx, obj.(*batchv1.CronJob), o)
	return err
}

func (cronJobKind) owned(_, name string) []owned { return []owned{{cronjobs, name}} }

// lead runs the term's side of the fence.
func (cronJobKind) lead(ctx context.Context, t *target, tt *term) { t.fence(ctx, tt) }

// renderCronJob makes the CronJob of the shard. A paused CronJob is
// suspended (as its own suspend field does): no new runs, running ones
// finish.
func renderCronJob(w *api.Workload, sh api.Shard) object {
	s := w.Spec.(*api.CronJobSpec)
	var tz *string
	if s.TimeZone != "" {
		tz = ptr.To(s.TimeZone)
	}
	m := meta(w, sh)
	jobMeta := metav1.ObjectMeta{Labels: labels(w, sh), Annotations: map[string]string{api.AnnoGeneration: m.Annotations[api.AnnoGeneration]}}
	if !sh.FireFrom.IsZero() {
		jobMeta.Annotations[api.AnnoFireFrom] = sh.FireFrom.UTC().Format(time.RFC3339)
	}
	c := &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: m,
		Spec: batchv1.CronJobSpec{
			Schedule:                   s.Schedule,
			TimeZone:                   tz,
			StartingDeadlineSeconds:    s.StartingDeadlineSeconds,
			ConcurrencyPolicy:          batchv1.ConcurrencyPolicy(s.ConcurrencyPolicy),
			Suspend:                    ptr.To(s.Suspend || w.Control.Paused),
			SuccessfulJobsHistoryLimit: s.SuccessfulJobsHistoryLimit,
			FailedJobsHistoryLimit:     s.FailedJobsHistoryLimit,
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: jobMeta,
				Spec: batchv1.JobSpec{
					Parallelism:  ptr.To(s.Parallelism),
					Completions:  ptr.To(s.Completions),
					BackoffLimit: s.BackoffLimit,
					Template:     podTemplate(w, sh, corev1.RestartPolicyNever),
				},
			},
		},
	}
	return object{gvr: cronjobs, name: c.Name, obj: c}
}

// FenceName names the ValidatingAdmissionPolicy and its binding.
const FenceName = "atoll-cronjob-fence"

// FenceManager is the field manager of the lease renewals.
const FenceManager = "atoll-cronjob-fence"

// fenceReapply is how often a term applies the policy again, repairing a
// policy someone deleted (an unchanged apply writes nothing).
const fenceReapply = Resync

// The CEL of the fence: the Job's annotations, the schedule time, and the
// two bounds.
const (
	celAnnos     = "object.metadata.annotations"
	celScheduled = celAnnos + "['" + batchv1.CronJobScheduledTimestampAnnotation + "']"
	celFrom      = celAnnos + "['" + api.AnnoFireFrom + "']"
	celUntil     = celAnnos + "['" + api.AnnoFireUntil + "']"
)

// fencePolicy is the ValidatingAdmissionPolicy of the fence.
func fencePolicy() *admissionv1.ValidatingAdmissionPolicy {
	return &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: FenceName, Labels: map[string]string{api.LabelManaged: "true"}},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs"}},
				}}},
			},
			MatchConditions: []admissionv1.MatchCondition{{
				Name: "fenced-cronjob-run",
				Expression: "has(" + celAnnos + ") && '" + batchv1.CronJobScheduledTimestampAnnotation + "' in " + celAnnos +
					" && ('" + api.AnnoFireFrom + "' in " + celAnnos + " || '" + api.AnnoFireUntil + "' in " + celAnnos + ")",
			}},
			Validations: []admissionv1.Validation{
				{
					Expression: "!('" + api.AnnoFireFrom + "' in " + celAnnos + ") || timestamp(" + celScheduled + ") >= timestamp(" + celFrom + ")",
					MessageExpression: "'schedule time ' + " + celScheduled + " + ' is before this cluster\\'s " + api.AnnoFireFrom + " ' + " + celFrom +
						" + ': the CronJob moved here, and the cluster it left may have fired it'",
					Reason: ptr.To(metav1.StatusReasonForbidden),
				},
				{
					Expression: "!('" + api.AnnoFireUntil + "' in " + celAnnos + ") || timestamp(" + celScheduled + ") <= timestamp(" + celUntil + ")",
					MessageExpression: "'schedule time ' + " + celScheduled + " + ' is after this cluster\\'s " + api.AnnoFireUntil + " ' + " + celUntil +
						" + ': its lease to fire the CronJob was not renewed (the CronJob may have moved to another cluster)'",
					Reason: ptr.To(metav1.StatusReasonForbidden),
				},
			},
		},
	}
}

// fenceBinding binds the fence to the Jobs of the platform's workloads in
// the projects' namespaces.
func fenceBinding() *admissionv1.ValidatingAdmissionPolicyBinding {
	exists := []metav1.LabelSelectorRequirement{{Key: api.LabelProject, Operator: metav1.LabelSelectorOpExists}}
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: FenceName, Labels: map[string]string{api.LabelManaged: "true"}},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        FenceName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: exists},
				ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: api.LabelWorkload, Operator: metav1.LabelSelectorOpExists}}},
			},
		},
	}
}

// ensureFence applies the policy and its binding to the cluster of cs,
// unless term tt applied it there already (always with force).
func ensureFence(ctx context.Context, tt *term, cs kubernetes.Interface, force bool) error {
	if tt.fenced.Load() && !force {
		return nil
	}
	policy, err := json.Marshal(fencePolicy())
	if err != nil {
		return err
	}
	binding, err := json.Marshal(fenceBinding())
	if err != nil {
		return err
	}
	o := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}
	adm := cs.AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Patch(ctx, FenceName, types.ApplyPatchType, policy, o); err != nil {
		return fmt.Errorf("apply the cronjob fence policy: %w", err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Patch(ctx, FenceName, types.ApplyPatchType, binding, o); err != nil {
		return fmt.Errorf("apply the cronjob fence binding: %w", err)
	}
	tt.fenced.Store(true)
	return nil
}

// leaseCronJob writes a rendered CronJob's lease: api.AnnoFireUntil in
// its Job template, until.
func leaseCronJob(o *object, until time.Time) {
	c := o.obj.(*batchv1.CronJob)
	a := maps.Clone(c.Spec.JobTemplate.Annotations)
	if a == nil {
		a = map[string]string{}
	}
	a[api.AnnoFireUntil] = until.Format(time.RFC3339)
	c.Spec.JobTemplate.Annotations = a
}

// fence runs a term's side of the fence in its cluster until ctx ends:
// the policy applied at once and every fenceReapply, and the lease of
// every CronJob placed here renewed at once and every renewal period of
// the Service's fence (api.CronFenceRenew by default).
func (t *target) fence(ctx context.Context, tt *term) {
	tick := time.NewTicker(t.s.fence.OrDefault().Renew)
	defer tick.Stop()
	var applied time.Time
	for {
		if time.Since(applied) >= fenceReapply && len(t.informers[api.KindCronJob].GetStore().ListKeys()) > 0 {
			if err := t.call(func() error { return ensureFence(ctx, tt, t.cs, true) }); err != nil {
				if ctx.Err() == nil {
					t.log.Warn("cannot apply the cronjob fence", "err", err)
				}
			} else {
				applied = time.Now()
			}
		}
		t.renewLeases(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renewLeases renews the lease of every CronJob this cluster holds whose
// placement keeps it here.
func (t *target) renewLeases(ctx context.Context) {
	inf := t.informers[api.KindCronJob]
	if inf == nil {
		return
	}
	var renewed, failed int
	var firstErr error
	for _, obj := range inf.GetStore().List() {
		m, ok := obj.(metav1.Object)
		key, kok := keyOf(obj)
		if !ok || !kok || m.GetDeletionTimestamp() != nil || !t.placedHere(key) {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if err := t.renewLease(ctx, m.GetNamespace(), m.GetName(), time.Now()); err != nil {
			failed++
			firstErr = cmpErr(firstErr, err)
			continue
		}
		renewed++
	}
	if failed > 0 && ctx.Err() == nil {
		t.log.Warn("cronjob leases not renewed", "renewed", renewed, "failed", failed, "err", firstErr)
	} else if renewed > 0 {
		t.log.Debug("cronjob leases renewed", "renewed", renewed)
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// placedHere says whether key's placement has a shard in this cluster,
// decoding the placement's shards only.
func (t *target) placedHere(key string) bool {
	e, ok := t.s.placements.Get(key)
	if !ok {
		return false
	}
	var p struct {
		Shards []struct {
			Cluster string `json:"cluster"`
		} `json:"shards"`
	}
	if json.Unmarshal(e.Value, &p) != nil {
		return false
	}
	return slices.ContainsFunc(p.Shards, func(s struct {
		Cluster string `json:"cluster"`
	}) bool {
		return s.Cluster == t.name
	})
}

// renewLease writes the lease of the CronJob ns/name from now: a
// server-side apply of that one annotation, under FenceManager. An apply
// of a CronJob that is gone fails its validation (no schedule) and
// creates nothing.
func (t *target) renewLease(ctx context.Context, ns, name string, now time.Time) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": "batch/v1", "kind": "CronJob",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"jobTemplate": map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{api.AnnoFireUntil: t.s.fence.FireUntil(now).Format(time.RFC3339)},
		}}},
	})
	if err != nil {
		return err
	}
	err = t.call(func() error {
		_, err := t.dyn.Resource(cronjobs).Namespace(ns).Patch(ctx, name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FenceManager, Force: ptr.To(true)})
		return err
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("renew the lease of cronjob %s/%s: %w", ns, name, err)
	}
	return err
}
