package clusters

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The cluster-facing services: each has an identity of its own in every
// member cluster (User), its own credential (a client certificate with
// that common name, credentials.go) and its own ClusterRole (Access).
const (
	Propagator  = "propagator"
	Aggregator  = "aggregator"
	Remediation = "remediation"
	Upgrade     = "upgrade"
)

// Services are the cluster-facing services, the only ones given member
// credentials.
var Services = []string{Propagator, Aggregator, Remediation, Upgrade}

// User is the Kubernetes user name of a service in every member cluster
// ("atoll-<service>"): its certificate's common name, the subject of its
// ClusterRoleBinding.
func User(service string) string { return "atoll-" + service }

// Group is the organization of every service's certificate: the services
// as a whole, bound to nothing.
const Group = "atoll:services"

// AggregatorDebugRole is the ClusterRole the propagator binds to the
// aggregator in each project namespace it creates (a RoleBinding of the
// same name): pods/log and pods/exec there and nowhere else.
const AggregatorDebugRole = "atoll-aggregator-debug"

// PropagatorConfigRole is the ClusterRole the propagator binds to itself
// in a project namespace (a RoleBinding of the same name) where it first
// writes a Config's ConfigMap or a Secret's Secret: configmaps and secrets
// there and nowhere else, so that it reads no Secret outside project
// namespaces (NamespacePolicy confines its writes; RBAC alone confines
// its reads).
const PropagatorConfigRole = "atoll-propagator-config"

// NamespacePolicy names the ValidatingAdmissionPolicy (and its binding)
// that confines the propagator's writes to project namespaces.
const NamespacePolicy = "atoll-propagator-namespaces"

// FenceName is the propagator's CronJob fence policy and binding
// (services/propagator FenceName), the only admission objects it writes.
const FenceName = "atoll-cronjob-fence"

// FieldManager is the field manager of the objects Apply writes.
const FieldManager = "atoll-members"

var (
	read  = []string{"get", "list", "watch"}
	write = []string{"create", "update", "patch", "delete"}
)

// rendered are the kinds the propagator renders (services/propagator's
// kind table): it reads them everywhere (its informers watch every
// namespace by label) and writes them, confined to project namespaces by
// NamespacePolicy.
var rendered = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods", "persistentvolumeclaims", "services"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "daemonsets"}},
	// The current ReplicaSet of an App shard whose sidecar images are
	// patched in place (services/propagator sidecars_inplace.go).
	{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}},
	{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}},
	{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}},
	// The managed EndpointSlices of an App's region-wide address
	// (services/propagator endpoints.go).
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}},
	// The Ingresses of exposed Apps (services/propagator expose.go); their
	// status is the ingress controller's, never the propagator's.
	{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}},
}

// Roles are the ClusterRoles of the cluster-facing services in every
// member cluster, by name.
//
// The propagator reads and writes the kinds it renders, the ReplicaSets of
// Apps it updates in place, and project namespaces (create, label, and
// delete with their project: their names are projects', so RBAC's
// resourceNames, which take no patterns, cannot list them; NamespacePolicy
// refuses any namespace, and any namespaced write, outside atoll-*), its
// CronJob fence's admission objects by name, and the aggregator's debug
// RoleBinding by name, with bind on that role only.
//
// The aggregator reads what its informers and inventory watch (no Secret,
// no ConfigMap); pods/log and pods/exec come from AggregatorDebugRole,
// bound only in project namespaces.
//
// Configs and Secrets (configmaps, secrets) the propagator reads and
// writes through PropagatorConfigRole, bound to itself in each project
// namespace that needs them, never cluster-wide.
//
// Remediation and upgrade cordon (patch nodes), create replacement nodes
// and delete the old ones, list pods and budgets to drain, and evict. They
// may delete pods too: a drain past its deadline with policy force deletes
// what it could not evict, which deleting the node would do anyway (the
// pod garbage collector). They read nothing else.
func Roles() map[string][]rbacv1.PolicyRule {
	propagator := []rbacv1.PolicyRule{}
	for _, r := range rendered {
		r.Verbs = append(append([]string{}, read...), write...)
		propagator = append(propagator, r)
	}
	propagator = append(propagator,
		// An App's in-place update moves its current ReplicaSet to the new
		// template, and deletes an old one without pods that has it
		// (services/propagator app_inplace.go).
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"get", "list", "update", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
			ResourceNames: []string{FenceName}, Verbs: []string{"get", "create", "update", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"rolebindings"},
			ResourceNames: []string{AggregatorDebugRole, PropagatorConfigRole}, Verbs: []string{"get", "create", "update", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"},
			ResourceNames: []string{AggregatorDebugRole, PropagatorConfigRole}, Verbs: []string{"bind"}},
	)
	aggregator := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "nodes", "events", "persistentvolumeclaims", "services", "namespaces"}, Verbs: read},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: read},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "replicasets", "daemonsets", "statefulsets"}, Verbs: read},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: read},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: read},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: read},
		{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods", "nodes"}, Verbs: read},
	}
	nodes := func() []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
			{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"list"}},
		}
	}
	return map[string][]rbacv1.PolicyRule{
		User(Propagator): propagator,
		User(Aggregator): aggregator,
		AggregatorDebugRole: {
			{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}},
		},
		PropagatorConfigRole: {
			{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: append(append([]string{}, read...), write...)},
		},
		User(Remediation): nodes(),
		User(Upgrade):     nodes(),
	}
}

func labels() map[string]string { return map[string]string{"app.kubernetes.io/part-of": "atoll"} }

// ClusterRoles are Roles as objects.
func ClusterRoles() []*rbacv1.ClusterRole {
	var out []*rbacv1.ClusterRole
	for _, name := range []string{User(Propagator), User(Aggregator), AggregatorDebugRole, PropagatorConfigRole, User(Remediation), User(Upgrade)} {
		out = append(out, &rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels()},
			Rules:      Roles()[name],
		})
	}
	return out
}

// ClusterRoleBindings bind each service's ClusterRole to its User.
func ClusterRoleBindings() []*rbacv1.ClusterRoleBinding {
	var out []*rbacv1.ClusterRoleBinding
	for _, s := range Services {
		out = append(out, &rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: User(s), Labels: labels()},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: User(s)},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: User(s)}},
		})
	}
	return out
}

// PropagatorConfigBinding is the RoleBinding the propagator applies in a
// project namespace ns before it writes a ConfigMap or Secret there:
// PropagatorConfigRole to the propagator's User.
func PropagatorConfigBinding(ns string) *rbacv1.RoleBinding {
	b := AggregatorDebugBinding(ns)
	b.Name = PropagatorConfigRole
	b.RoleRef.Name = PropagatorConfigRole
	b.Subjects[0].Name = User(Propagator)
	return b
}

// AggregatorDebugBinding is the RoleBinding the propagator applies in each
// project namespace ns: AggregatorDebugRole to the aggregator's User.
func AggregatorDebugBinding(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: AggregatorDebugRole, Namespace: ns, Labels: labels()},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AggregatorDebugRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: User(Aggregator)}},
	}
}

// nsOf is the CEL of the namespace a request writes in: a namespace's own
// name, else the request's namespace ("" for cluster-scoped objects).
// Fields left empty are absent from the request: has() guards each.
const nsOf = `request.resource.resource == 'namespaces' && (!has(request.subResource) || request.subResource == '') ? ` +
	`(has(request.name) && request.name != '' ? request.name : object.metadata.name) : ` +
	`(has(request.namespace) ? request.namespace : '')`

// ProjectNamespace is the CEL that holds when variables.ns is a project
// namespace: atoll-*, but not atoll-system (Atoll's own).
const ProjectNamespace = `variables.ns.startsWith('atoll-') && variables.ns != 'atoll-system'`

// NamespacePolicies are the ValidatingAdmissionPolicy and its binding that
// refuse (403) any write of the propagator's outside a project namespace:
// RBAC cannot grant by namespace pattern. Cluster-scoped objects other
// than namespaces pass (RBAC names the few it may write).
func NamespacePolicies() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	p := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: NamespacePolicy, Labels: labels()},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect},
					Rule:       admissionv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
				}}},
			},
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "propagator",
				Expression: "request.userInfo.username == '" + User(Propagator) + "'",
			}},
			Variables: []admissionv1.Variable{{Name: "ns", Expression: nsOf}},
			Validations: []admissionv1.Validation{{
				Expression:        "(variables.ns == '' && request.resource.resource != 'namespaces') || (" + ProjectNamespace + ")",
				MessageExpression: "'" + User(Propagator) + " writes only in project namespaces (atoll-*), not in ' + (variables.ns == '' ? 'the cluster scope' : variables.ns)",
				Reason:            ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	b := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: NamespacePolicy, Labels: labels()},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        NamespacePolicy,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return p, b
}

// Apply makes the services' access in a member cluster, as its admin (cs):
// the ClusterRoles, their bindings and NamespacePolicies, by server-side
// apply, so a second run (a join again, an upgrade) changes only what
// differs. The services' credentials are made apart (IssueKubeconfig).
func Apply(ctx context.Context, cs kubernetes.Interface) error {
	o := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}
	apply := func(what, name string, obj any, patch func([]byte) error) error {
		body, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		if err := patch(body); err != nil {
			return fmt.Errorf("apply %s %s: %w", what, name, err)
		}
		return nil
	}
	rbac := cs.RbacV1()
	for _, r := range ClusterRoles() {
		if err := apply("clusterrole", r.Name, r, func(b []byte) error {
			_, err := rbac.ClusterRoles().Patch(ctx, r.Name, types.ApplyPatchType, b, o)
			return err
		}); err != nil {
			return err
		}
	}
	for _, r := range ClusterRoleBindings() {
		if err := apply("clusterrolebinding", r.Name, r, func(b []byte) error {
			_, err := rbac.ClusterRoleBindings().Patch(ctx, r.Name, types.ApplyPatchType, b, o)
			return err
		}); err != nil {
			return err
		}
	}
	p, pb := NamespacePolicies()
	adm := cs.AdmissionregistrationV1()
	if err := apply("validatingadmissionpolicy", p.Name, p, func(b []byte) error {
		_, err := adm.ValidatingAdmissionPolicies().Patch(ctx, p.Name, types.ApplyPatchType, b, o)
		return err
	}); err != nil {
		return err
	}
	return apply("validatingadmissionpolicybinding", pb.Name, pb, func(b []byte) error {
		_, err := adm.ValidatingAdmissionPolicyBindings().Patch(ctx, pb.Name, types.ApplyPatchType, b, o)
		return err
	})
}
