package api

import (
	"fmt"
	"slices"
	"strings"
)

// NamespacePrefix begins the member-cluster namespace of every project.
const NamespacePrefix = "atoll-"

// MaxProjectLen is the longest project name: its namespace must be a DNS
// label (63 characters) with NamespacePrefix in front.
const MaxProjectLen = 63 - len(NamespacePrefix)

// Namespace is the member-cluster namespace of a project. For every
// project CheckProject accepts, it is a valid namespace name that is none
// of the platform's own.
func Namespace(project string) string { return NamespacePrefix + project }

// reservedProjects are names no project may take: their namespace is, or
// may become, one of the platform's own (atoll-system), or the name stands
// for the platform elsewhere ("platform" is the audit's region-wide
// project) or for Kubernetes' own namespaces.
var reservedProjects = []string{"system", "default", "platform", "public", "kube"}

// reservedProjectPrefixes begin names no project may take (kube-system,
// atoll-...: they would read as the platform's).
var reservedProjectPrefixes = []string{"kube-", "atoll-", "openshift-"}

// CheckProject says what is wrong with a project name: ok, or a field
// error code and reason. Workloads and operations are checked with it, so
// that Namespace never yields an invalid or platform namespace.
func CheckProject(project string) (code, reason string, ok bool) {
	switch {
	case project == "":
		return CodeRequired, "project is required", false
	case len(project) > MaxProjectLen:
		return CodeInvalid, fmt.Sprintf("project names are at most %d characters (its namespace is %s<project>, at most 63); this one has %d", MaxProjectLen, NamespacePrefix, len(project)), false
	case !IsDNSLabel(project):
		return CodeInvalid, fmt.Sprintf("%q is not a DNS label (lower-case letters, digits and '-', starting and ending with a letter or digit)", project), false
	case slices.Contains(reservedProjects, project):
		return CodeInvalid, fmt.Sprintf("%q is reserved for the platform; choose another project name", project), false
	}
	for _, p := range reservedProjectPrefixes {
		if strings.HasPrefix(project, p) {
			return CodeInvalid, fmt.Sprintf("project names starting with %q are reserved for the platform", p), false
		}
	}
	return "", "", true
}
