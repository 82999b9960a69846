package api

import (
	"slices"
	"strings"
	"time"
	"unicode"
)

// The projects bucket (bus.BucketProjects; admission is its only writer)
// holds two kinds of key:
//
//	p.<project>   ProjectDoc: the project, its members and their roles
//	u.<subject>   ProjectCreations: the projects a user made by self-service
//
// One document per project keeps a membership change atomic (the last
// admin is never removed by two concurrent removals); its size grows with
// the members, never with the workloads.
const (
	// ProjectKeyPrefix starts every ProjectDoc key.
	ProjectKeyPrefix = "p."
	// ProjectFilter matches every ProjectDoc key (a KV watch filter).
	ProjectFilter = ProjectKeyPrefix + ">"
	// ProjectCreationsPrefix starts every ProjectCreations key.
	ProjectCreationsPrefix = "u."
)

// ProjectKey is the projects bucket key of a project (a DNS label, so a
// valid key token as it is).
func ProjectKey(project string) string { return ProjectKeyPrefix + project }

// ProjectOfKey returns the project of a ProjectDoc key.
func ProjectOfKey(key string) (string, bool) {
	p, ok := strings.CutPrefix(key, ProjectKeyPrefix)
	return p, ok && p != ""
}

// ProjectCreationsKey is the projects bucket key of the self-service
// projects subject made.
func ProjectCreationsKey(subject string) string {
	return ProjectCreationsPrefix + EscapeKeyToken(subject)
}

// Project roles, weakest first: viewer reads, developer also changes
// workloads, admin also manages the project and its members.
const (
	RoleViewer    = "viewer"
	RoleDeveloper = "developer"
	RoleAdmin     = "admin"
)

// RoleRank orders roles: 0 for an unknown one, then viewer < developer <
// admin.
func RoleRank(role string) int {
	return slices.Index([]string{RoleViewer, RoleDeveloper, RoleAdmin}, role) + 1
}

// Member kinds: a user is a token's or JWT's subject, a group one of the
// groups its identity provider names (the tokens file's groups, a JWT's
// groups claim).
const (
	MemberUser  = "user"
	MemberGroup = "group"
)

// Member is one user or group with a role in a project.
type Member struct {
	// Kind is MemberUser or MemberGroup.
	Kind string `json:"kind"`
	// Name is the user's subject or the group's name, as the identity
	// provider writes it.
	Name string `json:"name"`
	// Role is RoleViewer, RoleDeveloper or RoleAdmin.
	Role string `json:"role"`
	// Added is when the member got its current role, and AddedBy who gave it.
	Added   time.Time `json:"added"`
	AddedBy string    `json:"addedBy,omitempty"`
}

// ProjectDoc is a project as stored at ProjectKey.
type ProjectDoc struct {
	// Name is the project's name (CheckProject).
	Name string `json:"name"`
	// DisplayName and Description are for people.
	DisplayName string `json:"displayName,omitempty"`
	Description string `json:"description,omitempty"`
	// Owner is the user accountable for the project; a project starts
	// with its owner as its one admin.
	Owner string `json:"owner"`
	// Labels classify the project (cost center, team).
	Labels map[string]string `json:"labels,omitempty"`
	// Members hold the project's roles, sorted by kind and name.
	Members []Member `json:"members"`
	// Created is when, and CreatedBy by whom, the project was made;
	// SelfService says it was made by a user, not a platform admin, and
	// counts towards that user's limit.
	Created     time.Time `json:"created"`
	CreatedBy   string    `json:"createdBy"`
	SelfService bool      `json:"selfService,omitempty"`
	// Updated is the last change.
	Updated time.Time `json:"updated"`
	// Deleting is set once a cascading deletion starts: nothing new is
	// created in the project, and admission finishes the deletion, after
	// a restart too.
	Deleting *ProjectDeletion `json:"deleting,omitempty"`
}

// ProjectDeletion records a cascading deletion in progress.
type ProjectDeletion struct {
	// Started is when, and By by whom, the deletion was asked for.
	Started time.Time `json:"started"`
	By      string    `json:"by"`
}

// Member returns the member of that kind and name, and whether there is one.
func (p *ProjectDoc) Member(kind, name string) (Member, bool) {
	i := slices.IndexFunc(p.Members, func(m Member) bool { return m.Kind == kind && m.Name == name })
	if i < 0 {
		return Member{}, false
	}
	return p.Members[i], true
}

// Admins counts the members with RoleAdmin.
func (p *ProjectDoc) Admins() int {
	n := 0
	for _, m := range p.Members {
		if m.Role == RoleAdmin {
			n++
		}
	}
	return n
}

// SetMember adds m or replaces the member of its kind and name, keeping
// Members sorted.
func (p *ProjectDoc) SetMember(m Member) {
	p.Members = slices.DeleteFunc(p.Members, func(x Member) bool { return x.Kind == m.Kind && x.Name == m.Name })
	p.Members = append(p.Members, m)
	slices.SortFunc(p.Members, func(a, b Member) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// RemoveMember removes the member of that kind and name; it says whether
// there was one.
func (p *ProjectDoc) RemoveMember(kind, name string) bool {
	n := len(p.Members)
	p.Members = slices.DeleteFunc(p.Members, func(x Member) bool { return x.Kind == kind && x.Name == name })
	return len(p.Members) < n
}

// ProjectCreations are the projects one user made by self-service, with
// when each was counted, so a creation that never landed (its writer died
// between the count and the project) can be told apart and forgotten.
type ProjectCreations struct {
	Projects map[string]time.Time `json:"projects"`
}

// Limits of a project's descriptive fields and members.
const (
	MaxDisplayNameLen = 100
	MaxDescriptionLen = 1000
	MaxMemberNameLen  = 253
	MaxProjectLabels  = 32
	MaxProjectMembers = 1000
)

// ProjectCreate asks admission to create a project. Owner "" is the
// caller; MaxPerCreator > 0 makes it a self-service creation, refused
// when the caller has made that many already.
type ProjectCreate struct {
	Name          string            `json:"name"`
	DisplayName   string            `json:"displayName,omitempty"`
	Description   string            `json:"description,omitempty"`
	Owner         string            `json:"owner,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	MaxPerCreator int               `json:"maxPerCreator,omitempty"`
}

// ProjectRef names a project (delete).
type ProjectRef struct {
	Project string `json:"project"`
	// Cascade deletes what the project holds with it.
	Cascade bool `json:"cascade,omitempty"`
}

// MemberSet adds a member to a project or changes its role.
type MemberSet struct {
	Project string `json:"project"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Role    string `json:"role"`
}

// MemberRemove removes a member from a project.
type MemberRemove struct {
	Project string `json:"project"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
}

// Validate names every problem of a project creation.
func (c *ProjectCreate) Validate() FieldErrors {
	var fe FieldErrors
	if code, reason, ok := CheckProject(c.Name); !ok {
		fe = append(fe, FieldError{Field: "name", Code: code, Reason: reason})
	}
	if len(c.DisplayName) > MaxDisplayNameLen || !printable(c.DisplayName) {
		fe.add("displayName", CodeInvalid, "at most %d printable characters", MaxDisplayNameLen)
	}
	if len(c.Description) > MaxDescriptionLen || strings.ContainsFunc(c.Description, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
		fe.add("description", CodeInvalid, "at most %d characters, no control characters but newlines and tabs", MaxDescriptionLen)
	}
	if c.Owner != "" {
		checkMemberName("owner", c.Owner, &fe)
	}
	if len(c.Labels) > MaxProjectLabels {
		fe.add("labels", CodeInvalid, "at most %d labels", MaxProjectLabels)
	}
	validateLabels("labels", c.Labels, &fe)
	return fe
}

// Validate names every problem of a member change.
func (m *MemberSet) Validate() FieldErrors {
	var fe FieldErrors
	checkMemberKind("kind", m.Kind, &fe)
	checkMemberName("name", m.Name, &fe)
	if RoleRank(m.Role) == 0 {
		fe.add("role", CodeUnsupported, "%q: one of viewer, developer, admin", m.Role)
	}
	return fe
}

// Validate names every problem of a member removal.
func (m *MemberRemove) Validate() FieldErrors {
	var fe FieldErrors
	checkMemberKind("kind", m.Kind, &fe)
	checkMemberName("name", m.Name, &fe)
	return fe
}

func checkMemberKind(field, kind string, fe *FieldErrors) {
	if kind != MemberUser && kind != MemberGroup {
		fe.add(field, CodeUnsupported, "%q: one of user, group", kind)
	}
}

func checkMemberName(field, name string, fe *FieldErrors) {
	switch {
	case name == "":
		fe.add(field, CodeRequired, "a user's subject or a group's name is required")
	case len(name) > MaxMemberNameLen || !printable(name) || strings.TrimSpace(name) != name:
		fe.add(field, CodeInvalid, "at most %d printable characters, without leading or trailing spaces", MaxMemberNameLen)
	}
}

func printable(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) })
}
