package propagator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/clusters"
)

// The propagator writes each Config a workload names as a ConfigMap, and
// each Secret (opened with the Keyring) as a Kubernetes Secret, of the
// same name in the project's namespace, in the member clusters that run a
// workload naming it, and only there (Karmada's dependencies
// distributor). They are labelled as Atoll's (api.LabelManaged,
// api.LabelProject, api.LabelConfigRef).
//
// Two paths write them. Before a shard is applied, the Configs and
// Secrets its workload names are (ensureConfigs), so its pods find them.
// A project's sync (syncConfigs, queued on the cluster's work queue as
// configsKey(project)) writes every one its workloads here name and
// deletes the Atoll copies nothing here names any more, or whose Config
// or Secret is gone; it runs when a shard leaves the cluster, when a
// Config or Secret changes, and at the start of each term. Secret values
// are never logged: errors name the Secret only.
//
// The propagator reads and writes configmaps and secrets only in the
// project namespaces where it has bound itself clusters.PropagatorConfigRole
// (before its first write or list there: projects that hold a Config or a
// Secret), never cluster-wide.

var (
	configMaps = corev1.SchemeGroupVersion.WithResource("configmaps")
	secrets    = corev1.SchemeGroupVersion.WithResource("secrets")
)

// AnnoConfigVersion on a ConfigMap or Secret the propagator writes is the
// content version it holds (a Config's ContentHash, a Secret's Digest).
const AnnoConfigVersion = "atoll.dev/config-version"

// SecretOpener opens a Secret's sealed values (libs/envelope's Keyring):
// the plaintext is the JSON of a map of keys to values; aad is the
// Secret's "project/name".
type SecretOpener interface {
	Open(d api.SealedData, aad []byte) ([]byte, error)
}

// errNoKeyring says a Secret was to be written without a key to open it.
var errNoKeyring = errors.New("no key-encryption keys (--kek-dir) to open Secrets with")

// configsPrefix starts the work queue keys of project syncs; a
// workload key never has it (its parts are DNS labels).
const configsPrefix = "configs:"

func configsKey(project string) string { return configsPrefix + project }

func configsProject(key string) (string, bool) { return strings.CutPrefix(key, configsPrefix) }

// isConfigKind says whether a workload key's kind (as keys spell it) is
// a Config or a Secret.
func isConfigKind(kind string) bool {
	return strings.EqualFold(kind, api.KindConfig) || strings.EqualFold(kind, api.KindSecret)
}

// configChanged queues a sync of the project of a Config or Secret that
// changed (or went) in every cluster this replica leads.
func (s *Service) configChanged(key string) {
	if !s.placementsLive.Load() {
		return // the mirror's first replay: each term syncs on its own
	}
	project, kind, _, err := api.ParseKey(key)
	if err != nil || !isConfigKind(kind) {
		return
	}
	for _, t := range s.targets {
		if tt := t.term.Load(); tt != nil {
			tt.work.Add(configsKey(project))
		}
	}
}

// configProjects lists the projects holding a Config or a Secret, whose
// copies a term starts by syncing.
func (s *Service) configProjects() []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range s.workloads.Keys() {
		project, kind, _, err := api.ParseKey(k)
		if err == nil && isConfigKind(kind) && !seen[project] {
			seen[project] = true
			out = append(out, project)
		}
	}
	return out
}

// configObject is a rendered ConfigMap or Secret.
type configObject struct {
	gvr     schema.GroupVersionResource
	name    string
	version string
	obj     any
}

// renderConfig reads the Config or Secret ref names from the workloads
// mirror and renders it for project's namespace; ok is false when it does
// not exist.
func (s *Service) renderConfig(project string, ref api.ConfigRef) (o configObject, ok bool, err error) {
	e, found := s.workloads.Get(api.Key(project, ref.Kind, ref.Name))
	if !found {
		return configObject{}, false, nil
	}
	o, err = renderConfigDoc(s.keyring, project, ref, e.Value)
	return o, err == nil, err
}

// renderConfigDoc renders the stored document raw of the Config or Secret
// ref names, opening a Secret with keyring.
func renderConfigDoc(keyring SecretOpener, project string, ref api.ConfigRef, raw []byte) (configObject, error) {
	var doc struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return configObject{}, fmt.Errorf("%s %s/%s: %w", ref.Kind, project, ref.Name, err)
	}
	ns := api.Namespace(project)
	meta := metav1.ObjectMeta{Name: ref.Name, Namespace: ns, Labels: map[string]string{
		api.LabelManaged: "true", api.LabelProject: project, api.LabelConfigRef: strings.ToLower(ref.Kind),
	}}
	switch ref.Kind {
	case api.KindSecret:
		var spec api.SecretSpec
		if err := json.Unmarshal(doc.Spec, &spec); err != nil {
			return configObject{}, fmt.Errorf("secret %s/%s: decode", project, ref.Name)
		}
		data, err := openSecret(keyring, project, ref.Name, &spec)
		if err != nil {
			return configObject{}, err
		}
		meta.Annotations = map[string]string{AnnoConfigVersion: spec.Digest}
		return configObject{gvr: secrets, name: ref.Name, version: spec.Digest, obj: &corev1.Secret{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: data,
		}}, nil
	default:
		var spec api.ConfigSpec
		if err := json.Unmarshal(doc.Spec, &spec); err != nil {
			return configObject{}, fmt.Errorf("config %s/%s: %w", project, ref.Name, err)
		}
		v := spec.ContentHash()
		meta.Annotations = map[string]string{AnnoConfigVersion: v}
		return configObject{gvr: configMaps, name: ref.Name, version: v, obj: &corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta, Data: spec.Content(),
		}}, nil
	}
}

// openSecret opens a stored Secret's values. Its errors never hold a value.
func openSecret(keyring SecretOpener, project, name string, spec *api.SecretSpec) (map[string][]byte, error) {
	if spec.Sealed == nil {
		return nil, fmt.Errorf("secret %s/%s: not sealed", project, name)
	}
	if keyring == nil {
		return nil, fmt.Errorf("secret %s/%s: %w", project, name, errNoKeyring)
	}
	plain, err := keyring.Open(*spec.Sealed, []byte(project+"/"+name))
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: open: %w", project, name, err)
	}
	var kv map[string]string
	if err := json.Unmarshal(plain, &kv); err != nil {
		return nil, fmt.Errorf("secret %s/%s: opened values are not a map of strings", project, name)
	}
	out := make(map[string][]byte, len(kv))
	for k, v := range kv {
		out[k] = []byte(v)
	}
	return out, nil
}

// refsOf lists what d's workload names in this cluster's shard: its
// template's references, and during an App's rollout the zone's template's.
func (d *desired) refsOf(sh api.Shard) []api.ConfigRef {
	refs := d.workload.Spec.PodTemplate().Refs()
	if zw := d.zoneWorkload(sh); zw != d.workload {
		refs = append(refs, zw.Spec.PodTemplate().Refs()...)
	}
	return refs
}

// ensureConfigs writes, before a shard is applied, the Configs and
// Secrets its workload names that exist (a missing one is admission's to
// refuse, or a forced delete's condition).
func (t *target) ensureConfigs(ctx context.Context, tt *term, d *desired, sh api.Shard) error {
	project := d.workload.Metadata.Project
	for _, ref := range d.refsOf(sh) {
		if _, err := t.writeConfig(ctx, tt, project, ref); err != nil {
			return err
		}
	}
	return nil
}

// writeConfig writes the copy of ref here unless this term wrote that
// version already; ok is false when the Config or Secret does not exist.
func (t *target) writeConfig(ctx context.Context, tt *term, project string, ref api.ConfigRef) (bool, error) {
	o, ok, err := t.s.renderConfig(project, ref)
	if err != nil || !ok {
		return ok, err
	}
	ns := api.Namespace(project)
	ck := ns + "/" + ref.ID()
	if v, done := tt.lookupConfig(ck); done && v == o.version {
		return true, nil
	}
	if err := t.ensureConfigAccess(ctx, ns); err != nil {
		return true, err
	}
	body, err := json.Marshal(o.obj)
	if err != nil {
		return true, fmt.Errorf("%s %s/%s: encode", ref.Kind, ns, ref.Name)
	}
	err = t.call(func() error {
		_, err := t.dyn.Resource(o.gvr).Namespace(ns).Patch(ctx, o.name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
		return err
	})
	if err != nil {
		// The API server's error names the object, never its data.
		return true, fmt.Errorf("apply %s %s/%s: %w", o.gvr.Resource, ns, o.name, err)
	}
	tt.recordConfig(ck, o.version)
	t.log.Debug("config applied", "namespace", ns, "kind", ref.Kind, "name", ref.Name, "version", o.version)
	return true, nil
}

// syncConfigs makes project's copies here what its workloads here name:
// each written, and every other copy of Atoll's deleted.
func (t *target) syncConfigs(ctx context.Context, tt *term, project string) error {
	wanted := map[string]bool{} // by resource/name
	var firstErr error
	for _, key := range t.s.placements.Keys() {
		if !strings.HasPrefix(key, project+".") {
			continue
		}
		d, err := t.s.desiredFor(key)
		if err != nil {
			continue // not current yet: its own reconcile syncs again
		}
		sh := d.shard(t.name)
		if sh == nil {
			continue
		}
		for _, ref := range d.refsOf(*sh) {
			ok, err := t.writeConfig(ctx, tt, project, ref)
			if err != nil {
				// Kept as it is, and the others still synced.
				firstErr = cmp.Or(firstErr, err)
			}
			if ok {
				wanted[configResource(ref.Kind)+"/"+ref.Name] = true
			}
		}
	}
	ns := api.Namespace(project)
	if len(wanted) == 0 && !t.usesConfigs(ns) && !slices.Contains(t.s.configProjects(), project) {
		return firstErr // no Config here to keep or remove
	}
	// Bound before the list, which RBAC refuses elsewhere (a refusal the
	// region's audit counts against the propagator).
	if err := t.ensureConfigAccess(ctx, ns); err != nil {
		return cmp.Or(firstErr, err)
	}
	for _, gvr := range []schema.GroupVersionResource{configMaps, secrets} {
		var names []string
		err := t.call(func() error {
			l, err := t.meta.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelConfigRef})
			if err != nil {
				return err
			}
			for _, o := range l.Items {
				names = append(names, o.Name)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("list %s %s: %w", gvr.Resource, ns, err)
		}
		for _, name := range names {
			if wanted[gvr.Resource+"/"+name] {
				continue
			}
			if err := t.delete(ctx, gvr, ns, name); err != nil {
				return err
			}
			tt.forgetConfig(ns + "/" + configKind(gvr) + "/" + name)
			t.log.Info("config removed", "namespace", ns, "resource", gvr.Resource, "name", name)
		}
	}
	return firstErr
}

func configResource(kind string) string {
	if kind == api.KindSecret {
		return secrets.Resource
	}
	return configMaps.Resource
}

func configKind(gvr schema.GroupVersionResource) string {
	if gvr == secrets {
		return api.KindSecret
	}
	return api.KindConfig
}

// ensureConfigAccess binds, once per process, the propagator's config
// role to itself in project namespace ns (clusters.PropagatorConfigBinding).
func (t *target) ensureConfigAccess(ctx context.Context, ns string) error {
	t.mu.Lock()
	known := t.configAccess[ns]
	t.mu.Unlock()
	if known {
		return nil
	}
	body, err := json.Marshal(clusters.PropagatorConfigBinding(ns))
	if err != nil {
		return err
	}
	err = t.call(func() error {
		_, err := t.cs.RbacV1().RoleBindings(ns).Patch(ctx, clusters.PropagatorConfigRole, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
		return err
	})
	if err != nil {
		return fmt.Errorf("namespace %s: config access: %w", ns, err)
	}
	if err := t.awaitConfigAccess(ctx, ns); err != nil {
		return err
	}
	t.mu.Lock()
	t.configAccess[ns] = true
	t.mu.Unlock()
	return nil
}

func (tt *term) lookupConfig(k string) (string, bool) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	v, ok := tt.configs[k]
	return v, ok
}

func (tt *term) recordConfig(k, version string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.configs[k] = version
}

func (tt *term) forgetConfig(k string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	delete(tt.configs, k)
}

// usesConfigs says whether this process wrote a Config's or Secret's
// copy in namespace ns (bound its config role there).
func (t *target) usesConfigs(ns string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.configAccess[ns]
}

// configAccessWait bounds how long a new binding may take to be in force.
const configAccessWait = 10 * time.Second

// awaitConfigAccess waits until the API server's authorizer knows the
// binding just applied in ns (its RBAC cache lags the write): it asks
// with self access reviews, which are answered, not refused, so the
// propagator's first list or write there is not a 403.
func (t *target) awaitConfigAccess(ctx context.Context, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, configAccessWait)
	defer cancel()
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Resource: "secrets"},
	}}
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		var allowed bool
		err := t.call(func() error {
			r, err := t.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err == nil {
				allowed = r.Status.Allowed
			}
			return err
		})
		switch {
		case err != nil:
			return fmt.Errorf("namespace %s: config access review: %w", ns, err)
		case allowed:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s: config access not in force after %v", ns, configAccessWait)
		case <-time.After(delay):
		}
	}
}
