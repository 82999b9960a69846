package sdk

import (
	"context"

	"atoll.dev/libs/computeapi"
)

// CreateProject creates a project (platform admins; any user where the
// region allows self-service), with its owner as its one admin and the
// region's default quota.
func (c *Client) CreateProject(ctx context.Context, p computeapi.ProjectCreate) (*computeapi.Project, error) {
	r, err := c.API.CreateProjectWithResponse(ctx, p)
	return decode[computeapi.Project]("create project", r, err)
}

// Project returns a registered project with its members.
func (c *Client) Project(ctx context.Context, project string) (*computeapi.Project, error) {
	r, err := c.API.GetProjectWithResponse(ctx, project)
	return decode[computeapi.Project]("get project", r, err)
}

// DeleteProject deletes a project that holds no workloads (409 while it
// holds any).
func (c *Client) DeleteProject(ctx context.Context, project string) error {
	r, err := c.API.DeleteProjectWithResponse(ctx, project)
	return noContent("delete project", r, err)
}

// Members returns a registered project's members.
func (c *Client) Members(ctx context.Context, project string) ([]computeapi.Member, error) {
	r, err := c.API.ListMembersWithResponse(ctx, project)
	l, err := decode[computeapi.MemberList]("list members", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// SetMember adds a user or group ("user", "group"; "" is a user) to a
// project with role (viewer, developer, admin), or changes its role.
func (c *Client) SetMember(ctx context.Context, project, kind, name, role string) (*computeapi.Member, error) {
	r, err := c.API.SetMemberWithResponse(ctx, project, name, computeapi.MemberChange{Kind: kind, Role: role})
	return decode[computeapi.Member]("set member", r, err)
}

// RemoveMember removes a user or group ("" is a user) from a project.
func (c *Client) RemoveMember(ctx context.Context, project, kind, name string) error {
	r, err := c.API.RemoveMemberWithResponse(ctx, project, name, &computeapi.RemoveMemberParams{Kind: kind})
	return noContent("remove member", r, err)
}
